"""The trainer's step does less work than the plain formulas it replaces, with the same numbers bit for bit."""

from __future__ import annotations

import contextlib

import torch
from torch.profiler import ProfilerActivity, profile

from cbscore.model.config import GPTConfig
from cbscore.model.gpt import GPT, rotate
from cbscore.train.averaging import WeightAverage
from cbscore.train.step import StepFn, clip_, total_norm


def _grads(scale: float) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    shapes = [(300, 64), (64,), (64, 256), (7,), (1024, 64)]
    return [torch.randn(s, generator=g) * scale for s in shapes]


def test_the_norm_and_the_clip_are_torch_clip_grad_norm_bit_for_bit():
    for scale in (1e-3, 1.0):  # the clip inactive (a factor of exactly 1), then active
        params = [torch.nn.Parameter(torch.zeros_like(g)) for g in _grads(scale)]
        for p, g in zip(params, _grads(scale)):
            p.grad = g.clone()
        expected_norm = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        grads = _grads(scale)
        norm = total_norm(grads)
        clip_(grads, 1.0, norm)
        assert torch.equal(norm, expected_norm)
        assert all(torch.equal(g, p.grad) for g, p in zip(grads, params))


def test_rotary_without_a_negation_is_rotate_half_bit_for_bit():
    model = GPT(GPTConfig(d_model=64, n_layers=1, n_heads=2, vocab_size=16, context_tokens=40))
    x = torch.randn(3, 40, 2, 32).transpose(1, 2)  # (B, H, T, D), strided as the attention's q and k
    # the textbook form (Su et al. 2021): x·cos + rotate_half(x)·sin with the plain sine table
    head_dim = 32
    inv_freq = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(40, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    x1, x2 = x.chunk(2, dim=-1)
    expected = x * angles.cos() + torch.cat([-x2, x1], dim=-1) * angles.sin()
    assert model.config.rope_base == 10000.0
    assert torch.equal(rotate(x, model.rotary.tables(40, x.dtype)), expected)
    assert torch.equal(model.rotary(x), expected)


def _step_fn(micro: int):
    torch.manual_seed(0)
    model = GPT(GPTConfig(d_model=32, n_layers=2, n_heads=2, vocab_size=64, context_tokens=16))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    average = WeightAverage(list(model.parameters()), (0.9,))
    step = StepFn(model, optimizer, average, device=torch.device("cpu"), micro_batch_size=micro, batch_size=4,
                  autocast=contextlib.nullcontext, grad_clip=1.0)
    return model, step


def test_one_pass_gives_the_same_step_as_the_accumulating_loop_bit_for_bit():
    batch = torch.randint(0, 64, (4, 17)).numpy()
    model_a, one = _step_fn(4)
    model_b, loop = _step_fn(4)
    loop._passes = loop._accumulated_passes  # the general loop, run with one micro-batch
    assert one._passes == one._one_pass
    for _ in range(3):
        loss_a, norm_a = one(batch, 1e-3)
        loss_b, norm_b = loop(batch, 1e-3)
        assert torch.equal(loss_a, loss_b) and torch.equal(norm_a, norm_b)
    assert all(torch.equal(a, b) for a, b in zip(model_a.parameters(), model_b.parameters()))


def test_a_cpu_step_negates_nothing_and_steps_adamw_over_all_tensors_at_once():
    _, step = _step_fn(4)
    batch = torch.randint(0, 64, (4, 17)).numpy()
    step(batch, 1e-3)  # AdamW's state exists from here on
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step(batch, 1e-3)
    counts = {e.key: e.count for e in prof.key_averages()}
    assert "aten::neg" not in counts  # rotary swaps halves against a signed sine table
    assert counts.get("aten::_foreach_addcdiv_") == 1  # one multi-tensor update, not a Python loop
    assert counts.get("aten::_foreach_norm") == 1 and counts.get("aten::_foreach_lerp_") == 2  # Adam's m, EWA

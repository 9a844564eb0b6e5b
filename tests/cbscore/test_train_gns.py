"""The gradient noise scale inside the trainer: same update, known norms, checkpointed averages."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from cbscore.errors import ConfigError
from cbscore.train.callbacks import Callback
from cbscore.train.checkpoint import load_checkpoint
from cbscore.train.config import TrainConfig
from cbscore.train.gns import GnsProbe, two_batch_estimates
from cbscore.train.trainer import train
from tests.cbscore.test_train import Recorder as _Recorder
from tests.cbscore.test_train import tiny as _tiny

GNS_KEYS = {"gns_g2", "gns_trace_sigma", "gns_b_simple"}


def tiny(data, **changes) -> TrainConfig:
    """test_train.py's tiny trial, 40 steps."""
    return _tiny(data, **{"max_tokens": 8 * 32 * 40, **changes})


class Recorder(_Recorder):
    def gns(self):
        """``{step: (g2, trace, b_simple)}`` of the log steps that carried the noise scale."""
        return {m["step"]: (m["gns_g2"], m["gns_trace_sigma"], m["gns_b_simple"]) for m in self.metrics if "gns_g2" in m}


def test_the_probe_leaves_the_update_bit_for_bit_unchanged(builtin_slice_config, tmp_path):
    runs = {}
    for name, changes in {"off": dict(micro_batch_size=2, measure_gns=False), "on": dict(micro_batch_size=2),
                          "split": dict(gns_micro_batch_size=2)}.items():
        rec = Recorder()
        result = train(tiny(builtin_slice_config, max_steps=12, checkpoint_dir=str(tmp_path / name), **changes),
                       callbacks=[rec])
        runs[name] = (result, rec, load_checkpoint(tmp_path / name)["model"])
    (off, off_rec, off_w), (on, on_rec, on_w), (split, split_rec, split_w) = runs["off"], runs["on"], runs["split"]
    assert on.train_log == off.train_log == split.train_log
    assert [e.to_dict() for e in on.eval_history] == [e.to_dict() for e in off.eval_history]
    for name in off_w:
        assert torch.equal(on_w[name], off_w[name]) and torch.equal(split_w[name], off_w[name])
    # the extra split of the same batch measures what micro_batch_size=2 measures
    assert off_rec.gns() == {} and on_rec.gns() == split_rec.gns() != {}


def test_noise_scale_is_reported_at_every_log_step_and_so_every_evaluation(builtin_slice_config):
    rec = Recorder()
    result = train(tiny(builtin_slice_config, micro_batch_size=4), callbacks=[rec])
    eval_steps = {e.step for e in result.eval_history} - {0}  # step 0: nothing trained yet
    reported = rec.gns()
    assert set(reported) == {m["step"] for m in rec.metrics} >= eval_steps | set(range(5, 41, 5))
    for g2, trace, b_simple in reported.values():
        assert trace > 0
        if g2 is not None and g2 > 0:
            assert b_simple == pytest.approx(trace / g2)
    # a whole batch in one pass has nothing to compare: no keys at all
    single = Recorder()
    train(tiny(builtin_slice_config, max_steps=6), callbacks=[single])
    assert single.gns() == {}


def test_probe_norms_match_gradients_computed_one_micro_batch_at_a_time():
    torch.manual_seed(0)
    n_micro, m = 4, 3
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 1)).double()
    x, y = torch.randn(n_micro, m, 5, dtype=torch.float64), torch.randn(n_micro, m, 1, dtype=torch.float64)
    params = list(model.parameters())

    def loss(i):
        return (model(x[i]) - y[i]).square().mean()

    # by hand: each micro-batch's own gradient, and their mean
    micro = []
    for i in range(n_micro):
        model.zero_grad(set_to_none=True)
        loss(i).backward()
        micro.append(torch.cat([p.grad.flatten() for p in params]))
    small_hand = [float(g.square().sum()) for g in micro]
    big_hand = float(torch.stack(micro).mean(0).square().sum())

    # the trainer's way: (loss_i / n).backward() accumulates; the probe reads the differences
    probe = GnsProbe(params, n_micro=n_micro, micro_batch_size=m, batch_tokens=n_micro * m * 10, half_life_tokens=100)
    model.zero_grad(set_to_none=True)
    for i in range(n_micro):
        (loss(i) / n_micro).backward()
        probe.after_backward(i)
    full_norm = torch.nn.utils.clip_grad_norm_(params, 1e-3)  # returns the norm before clipping
    probe.end_step(full_norm)
    small, big = probe.pending[0]
    assert small.tolist() == pytest.approx(small_hand, rel=1e-9)
    assert float(big) == pytest.approx(big_hand, rel=1e-6)  # the norm comes back in fp32
    probe.sync()
    g2, trace = two_batch_estimates(small_hand, big_hand, m, n_micro * m)
    metrics = probe.metrics()
    assert metrics["gns_g2"] == pytest.approx(g2, rel=1e-5)
    assert metrics["gns_trace_sigma"] == pytest.approx(trace, rel=1e-5)


def test_non_finite_steps_are_skipped_and_reported_as_none():
    p = nn.Parameter(torch.zeros(3))
    probe = GnsProbe([p], n_micro=2, micro_batch_size=1, batch_tokens=4, half_life_tokens=8)
    assert set(probe.metrics().values()) == {None}  # nothing folded in yet
    for grads in ((torch.tensor([1.0, 0.0, 0.0]), torch.tensor([3.0, 0.0, 0.0])),
                  (torch.tensor([math.inf, 0.0, 0.0]), torch.tensor([1.0, 0.0, 0.0]))):
        p.grad = None
        for i, g in enumerate(grads):  # (loss_i / n).backward() with loss_i = p·g_i: .grad accumulates g_i / n
            (p @ g / 2).backward()
            probe.after_backward(i)
        probe.end_step(p.grad.norm())
    probe.sync()
    assert probe.tracker.steps == 1 and probe.tracker.skipped == 1
    # g_0 = 1, g_1 = 3 (one example each), G_big = 2: |G|² = (2·4 − 1·5)/1 = 3, tr Σ = (5 − 4)/(1 − ½) = 2
    assert probe.metrics() == pytest.approx({"gns_g2": 3.0, "gns_trace_sigma": 2.0, "gns_b_simple": 2.0 / 3.0})


def test_resume_continues_the_noise_scale_exactly(builtin_slice_config, tmp_path):
    class CrashAt(Callback):
        def post_step(self, state, metrics):
            if state.step == 17:
                raise RuntimeError("simulated kill")

    config = tiny(builtin_slice_config, micro_batch_size=4, checkpoint_every_steps=10, checkpoint_dir=str(tmp_path / "c"))
    whole = Recorder()
    train(config.replace(checkpoint_dir=str(tmp_path / "other"), checkpoint_every_steps=None), callbacks=[whole])
    with pytest.raises(RuntimeError):
        train(config, callbacks=[CrashAt()])
    saved = load_checkpoint(tmp_path / "c")["gns"]
    assert saved["steps"] == 10 and saved["half_life_tokens"] == config.resolved_gns_half_life_tokens()
    resumed = Recorder()
    result = train(config, callbacks=[resumed])
    assert result.resumed_from_step == 10
    after = {s: v for s, v in whole.gns().items() if s > 10}
    assert after and resumed.gns() == after  # identical values, not merely close


def test_gns_fields_are_checked_and_round_trip(builtin_slice_config):
    with pytest.raises(ConfigError, match=r"gns_micro_batch_size: must divide batch_size=8, but got 3"):
        tiny(builtin_slice_config, gns_micro_batch_size=3)
    with pytest.raises(ConfigError, match=r"gns_micro_batch_size: must divide micro_batch_size=4, but got 3"):
        tiny(builtin_slice_config, micro_batch_size=4, gns_micro_batch_size=3)
    with pytest.raises(ConfigError, match=r"gns_micro_batch_size: must be smaller than batch_size=8.*but got 8"):
        tiny(builtin_slice_config, gns_micro_batch_size=8)
    with pytest.raises(ConfigError, match=r"gns_half_life_tokens: must be a positive integer, but got 0"):
        tiny(builtin_slice_config, gns_half_life_tokens=0)
    with pytest.raises(ConfigError, match=r"measure_gns: must be true or false, but got 'yes'"):
        tiny(builtin_slice_config, measure_gns="yes")
    config = tiny(builtin_slice_config, micro_batch_size=4, gns_micro_batch_size=2, gns_half_life_tokens=777)
    assert TrainConfig.from_dict(config.to_dict()) == config
    assert config.pass_size() == 2 and config.resolved_gns_half_life_tokens() == 777
    # default half-life: 10% of the budget in tokens (40 steps of 256 tokens)
    assert tiny(builtin_slice_config).resolved_gns_half_life_tokens() == 1024


def test_under_ddp_rank_0_measures_its_own_micro_batch_against_the_global_batch():
    # rank 0 of two, one micro-batch each: the hook sees rank 0's local gradient g_0 (before the
    # all-reduce), the step's norm is of the all-reduced G = (g_0 + g_1)/2, a batch of 2
    p = nn.Parameter(torch.zeros(3))
    probe = GnsProbe([p], n_micro=1, micro_batch_size=1, batch_tokens=4, half_life_tokens=8, ranks=2)
    assert (probe.b_small, probe.b_big) == (1.0, 2.0)
    g0, g1 = torch.tensor([3.0, 1.0, 0.0]), torch.tensor([1.0, 1.0, 2.0])
    (p @ g0).backward()  # rank 0's loss: .grad = g_0
    probe.after_backward(0)
    probe.end_step(((g0 + g1) / 2).norm())
    probe.sync()
    g2, trace = two_batch_estimates([float(g0.square().sum())], float(((g0 + g1) / 2).square().sum()), 1, 2)
    assert probe.metrics()["gns_g2"] == pytest.approx(g2) and probe.metrics()["gns_trace_sigma"] == pytest.approx(trace)
    with pytest.raises(ConfigError, match="n_micro"):
        GnsProbe([p], n_micro=1, micro_batch_size=1, batch_tokens=4, half_life_tokens=8)  # one rank, one pass


def _accumulate(model, probe, x, y, n_micro):
    """One trainer step's passes: ``(loss_i / n).backward()`` per micro-batch, the probe reading each."""
    m = x.shape[0] // n_micro
    model.zero_grad(set_to_none=True)
    for i in range(n_micro):
        ((model(x[i * m:(i + 1) * m]) - y[i * m:(i + 1) * m]).square().mean() / n_micro).backward()
        probe.after_backward(i)
    probe.end_step(torch.nn.utils.clip_grad_norm_(list(model.parameters()), math.inf))


def _hand_estimates(model, x, y, n_micro):
    """``(|G|², tr Σ)`` from gradients computed one micro-batch at a time (float64)."""
    m = x.shape[0] // n_micro
    grads = []
    for i in range(n_micro):
        model.zero_grad(set_to_none=True)
        (model(x[i * m:(i + 1) * m]) - y[i * m:(i + 1) * m]).square().mean().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    small = [float(g.square().sum()) for g in grads]
    big = float(torch.stack(grads).mean(0).square().sum())
    return two_batch_estimates(small, big, m, x.shape[0])


def test_probe_keeps_measuring_across_an_out_of_memory_halving():
    """A halving between two log steps leaves steps of two splits queued: each is folded in at its
    own batch sizes (before: torch.stack of (4,) and (8,) tensors raised at the next log step)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 1)).double()
    x, y = torch.randn(8, 5, dtype=torch.float64), torch.randn(8, 1, dtype=torch.float64)
    probe = GnsProbe(model.parameters(), n_micro=4, micro_batch_size=2, batch_tokens=80, half_life_tokens=10**9)
    _accumulate(model, probe, x, y, 4)  # a step at micro-batch 2
    model.zero_grad(set_to_none=True)  # the next step's first pass, then out of memory: the trainer halves...
    ((model(x[:2]) - y[:2]).square().mean() / 4).backward()
    probe.after_backward(0)
    probe.resize(8, 1)  # ...to micro-batch 1 and redoes the step
    _accumulate(model, probe, x, y, 8)
    probe.sync()
    assert probe.tracker.steps == 2 and probe.tracker.skipped == 0
    # a half-life of 10⁹ tokens: the averages are the plain mean of the two steps' estimates
    first, second = _hand_estimates(model, x, y, 4), _hand_estimates(model, x, y, 8)
    assert probe.tracker.g2 == pytest.approx((first.g2 + second.g2) / 2, rel=1e-4)
    assert probe.tracker.trace == pytest.approx((first.trace + second.trace) / 2, rel=1e-4)


def test_probe_takes_all_norms_of_a_micro_batch_in_one_fused_launch(monkeypatch):
    from torch.profiler import ProfilerActivity, profile

    import cbscore.train.gns

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(6, 6) for _ in range(20)])  # 40 parameter tensors
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    probe = GnsProbe(model.parameters(), n_micro=2, micro_batch_size=2, batch_tokens=4, half_life_tokens=100)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _accumulate(model, probe, x, y, 2)
    counts = {e.key: e.count for e in prof.key_averages()}
    # one per micro-batch (not one per tensor), and clip_grad_norm_'s own
    assert counts.get("aten::_foreach_norm") == 2 + 1
    # no norm of one tensor outside a fused call (on a CPU, _foreach_norm itself loops over them)
    # but clip_grad_norm_'s total over its norms
    loose = [e for e in prof.events() if e.name == "aten::linalg_vector_norm"
             and (e.cpu_parent is None or e.cpu_parent.name != "aten::_foreach_norm")]
    assert len(loose) == 1
    fused = probe.pending[0][0]
    # a small batch size in bytes: several fused launches per micro-batch, the same norms
    monkeypatch.setattr(cbscore.train.gns, "NORM_BATCH_BYTES", 6 * 6 * 4 * 5)
    probe.pending.clear()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _accumulate(model, probe, x, y, 2)
    assert {e.key: e.count for e in prof.key_averages()}["aten::_foreach_norm"] > 2 + 1
    torch.testing.assert_close(probe.pending[0][0], fused, rtol=1e-6, atol=0)

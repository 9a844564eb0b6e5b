"""The paper's GPT: parameter counts, FLOPs, shapes, causality, rotary, initialisation."""

from __future__ import annotations

import math

import pytest
import torch

from cbscore.errors import ConfigError
from cbscore.model.config import PRESETS, GPTConfig, get_preset
from cbscore.model.gpt import GPT

torch.set_num_threads(1)


@pytest.mark.parametrize(
    ("name", "expected", "millions"),
    [
        ("85M", 84_934_656, 85),
        ("151M", 150_994_944, 151),
        ("302M", 301_989_888, 302),
        ("604M", 603_979_776, 604),
        ("1.2B", 1_207_959_552, 1208),
    ],
)
def test_paper_preset_non_embedding_params_match_their_names(name, expected, millions):
    preset = PRESETS[name]
    assert preset.n_params == 12 * preset.n_layers * preset.d_model**2 == expected
    assert round(expected / 1e6) == millions


def test_paper_preset_shapes_are_the_papers():
    shapes = {n: (PRESETS[n].d_model, PRESETS[n].n_layers, PRESETS[n].n_heads) for n in ("85M", "151M", "302M", "604M", "1.2B")}
    assert shapes == {
        "85M": (768, 12, 12),
        "151M": (1024, 12, 16),
        "302M": (1024, 24, 16),
        "604M": (2048, 12, 16),
        "1.2B": (2048, 24, 32),
    }


def test_built_model_counts_twelve_l_d_squared_non_embedding_params():
    # Build the 85M on the meta device (no memory) and count block matrices.
    with torch.device("meta"):
        model = GPT(PRESETS["85M"].config(vocab_size=8192))
    assert model.n_params == 84_934_656
    # embeddings (2·V·d) and LayerNorm gains (L·(2d + 2d) + d) on top
    assert model.n_params_total == 84_934_656 + 2 * 8192 * 768 + 12 * 4 * 768 + 768


def test_small_presets_span_laptop_sizes_and_include_d128_l4():
    small = [p for p in PRESETS.values() if p.n_params < 10_000_000]
    assert min(p.n_params for p in small) < 150_000
    assert max(p.n_params for p in small) > 2_000_000
    assert any(p.d_model == 128 and p.n_layers == 4 for p in small)
    for p in small:  # each name states its N to one decimal in millions (two below 0.1M: tiny-0.06M)
        assert p.name.endswith(f"{p.n_params / 1e6:.{1 if p.n_params >= 95_000 else 2}f}M")


def test_flops_per_token_counts_blocks_head_and_attention_for_85m_at_gpt_neox_vocab():
    # PaLM appendix B, head included: 6·(N + d·V) + 12·L·d·T; 85M at T = 512, V = 50,277
    # 6·(84,934,656 + 768·50,277) + 12·12·768·512 = 741,284,352 + 56,623,104
    assert PRESETS["85M"].flops_per_token(512, vocab_size=50_277) == 797_907_456
    assert PRESETS["85M"].config(vocab_size=50_277).flops_per_token() == 797_907_456
    # the head is about 30% of the 85M model's training FLOPs at this vocabulary
    assert 6 * 768 * 50_277 / 797_907_456 == pytest.approx(0.290, abs=0.001)
    # without a vocabulary the default BPE's 8192 is assumed
    assert PRESETS["85M"].flops_per_token(512) == 566_231_040 + 6 * 768 * 8192


def test_flops_per_token_equals_the_matmul_flops_torch_counts_in_a_training_step():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    cfg = GPTConfig(d_model=64, n_layers=2, n_heads=2, vocab_size=300, context_tokens=32)
    model = GPT(cfg)
    idx = torch.randint(0, 300, (2, 32))
    counter = FlopCounterMode(display=False)
    with counter, sdpa_kernel(SDPBackend.MATH):  # the math kernel's attention is plain bmm
        _, loss = model(idx, idx)
        loss.backward()
    assert counter.get_total_flops() == 2 * 32 * model.flops_per_token()


def test_forward_shapes_and_initial_loss_is_near_log_vocab():
    torch.manual_seed(0)
    cfg = GPTConfig(d_model=64, n_layers=2, n_heads=2, vocab_size=512, context_tokens=32)
    model = GPT(cfg)
    idx = torch.randint(0, 512, (16, 32))
    none, loss = model(idx, torch.roll(idx, -1, dims=1))
    assert none is None  # with targets the logits are not returned (no (B, T, V) tensor kept alive)
    logits, _ = model(idx)
    assert logits.shape == (16, 32, 512)
    assert loss.shape == ()
    # the final LayerNorm makes h unit-variance and lm_head has σ = 1/√d, so logits ~ N(0, ≈1)
    # and E[CE] = E[logsumexp z] ≈ ln V + σ²/2 (lognormal mean) = 6.238 + 0.49
    sigma2 = logits.var().item()
    assert sigma2 == pytest.approx(0.973, rel=0.05)
    assert loss.item() == pytest.approx(math.log(512) + sigma2 / 2, abs=0.15)
    assert model(idx)[1] is None


def test_attention_is_causal():
    torch.manual_seed(0)
    model = GPT(GPTConfig(d_model=64, n_layers=2, n_heads=4, vocab_size=100, context_tokens=16))
    idx = torch.randint(0, 100, (1, 16))
    changed = idx.clone()
    changed[0, 10:] = (changed[0, 10:] + 1) % 100
    a, _ = model(idx)
    b, _ = model(changed)
    torch.testing.assert_close(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_rotary_scores_depend_only_on_relative_position():
    model = GPT(GPTConfig(d_model=32, n_layers=1, n_heads=2, vocab_size=10, context_tokens=64))
    q = torch.randn(1, 1, 1, 16).expand(1, 1, 64, 16)  # same vector at every position
    k = torch.randn(1, 1, 1, 16).expand(1, 1, 64, 16)
    rq, rk = model.rotary(q), model.rotary(k)
    scores = (rq @ rk.transpose(-1, -2))[0, 0]  # (T, T)
    torch.testing.assert_close(scores[5, 2], scores[40, 37])  # offset 3 both times
    torch.testing.assert_close(scores[0, 0], (q[0, 0, 0] @ k[0, 0, 0]))  # position 0 is unrotated


def test_no_biases_and_untied_embeddings():
    model = GPT(GPTConfig(d_model=64, n_layers=2, n_heads=2, vocab_size=100, context_tokens=16))
    assert not any(name.endswith("bias") for name, _ in model.named_parameters())
    assert model.wte.weight.data_ptr() != model.lm_head.weight.data_ptr()


def test_olmo_init_scales_output_projections_down_with_depth():
    torch.manual_seed(0)
    d = 256
    model = GPT(GPTConfig(d_model=d, n_layers=4, n_heads=4, vocab_size=1000, context_tokens=16))
    trunc = 0.9866  # std of a normal truncated at ±3σ, in units of σ
    assert model.blocks[0].attn.qkv.weight.std().item() == pytest.approx(trunc / math.sqrt(d), rel=0.03)
    for i, block in enumerate(model.blocks):
        assert block.attn.out.weight.std().item() == pytest.approx(trunc / math.sqrt(2 * d * (i + 1)), rel=0.03)
        assert block.mlp.proj.weight.std().item() == pytest.approx(trunc / math.sqrt(8 * d * (i + 1)), rel=0.03)
        bound = 3 / math.sqrt(2 * d * (i + 1))
        assert block.attn.out.weight.abs().max().item() <= bound


def test_unknown_preset_and_bad_shape_name_field_and_value():
    with pytest.raises(ConfigError, match=r"model: is not a model preset .* but got 'gpt-5'\."):
        get_preset("gpt-5")
    with pytest.raises(ConfigError, match=r"n_heads: must divide d_model=64, but got 3\."):
        GPTConfig(d_model=64, n_layers=1, n_heads=3)

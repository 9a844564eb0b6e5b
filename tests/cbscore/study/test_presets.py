"""The paper presets are the paper's studies, and they load and plan with no network."""

from __future__ import annotations

import pytest

from cbscore.data import DataConfig
from cbscore.study import PAPER_LRS, load_preset
from cbscore.study.models import model_info

PAPER_MODELS = ("85M", "151M", "302M", "604M", "1.2B")
PAPER_BATCH_SIZES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PAPER_PRESETS = ("paper-chinchilla", "paper-fixed-d", "paper-fixed-n")


@pytest.fixture(autouse=True)
def _no_hub(monkeypatch):
    """Loading, validating and planning a preset must never reach for the hub."""
    import huggingface_hub

    import cbscore.data.tokenizer as tokenizer

    def refuse(*args, **kwargs):
        raise AssertionError("the hub was asked for something while a spec was only checked")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(tokenizer, "load_hub_tokenizer", refuse)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)  # imported at call time


def test_paper_chinchilla_trains_the_five_models_at_their_chinchilla_tokens():
    spec = load_preset("paper-chinchilla")
    assert [(s.model, s.tokens) for s in spec.resolve_settings()] == [
        ("85M", 1_741_000_000), ("151M", 3_072_000_000), ("302M", 6_144_000_000),
        ("604M", 12_288_000_000), ("1.2B", 24_576_000_000)]


def test_paper_fixed_d_trains_the_five_models_on_the_151m_chinchilla_budget():
    spec = load_preset("paper-fixed-d")
    assert [(s.model, s.tokens) for s in spec.resolve_settings()] == [(m, 3_072_000_000) for m in PAPER_MODELS]


def test_paper_fixed_n_trains_302m_from_028x_to_4x_its_chinchilla_budget():
    spec = load_preset("paper-fixed-n")
    chinchilla = 6_144_000_000
    assert [s.model for s in spec.resolve_settings()] == ["302M"] * 5
    assert [s.tokens for s in spec.resolve_settings()] == [
        round(m * chinchilla) for m in (0.28, 0.5, 1, 2, 4)] == [
        1_720_320_000, 3_072_000_000, 6_144_000_000, 12_288_000_000, 24_576_000_000]


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_paper_presets_share_the_paper_recipe(name):
    spec = load_preset(name)
    assert (spec.context_tokens, spec.b_ref, spec.overhead) == (512, 256, 0.2)
    assert spec.batch_sizes == PAPER_BATCH_SIZES
    assert spec.search.kind == "grid" and spec.search.lrs == PAPER_LRS
    assert (spec.beta1, spec.weight_decay, spec.grad_clip, spec.warmup_fraction) == (0.95, 0.0, 1.0, 0.25)


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_paper_presets_tokenize_c4_with_gpt_neox_20b_checked_offline(name):
    spec = load_preset(name)
    data = DataConfig.from_dict(spec.data)
    assert data.source == "hub:allenai/c4:en"
    assert data.tokenizer == "EleutherAI/gpt-neox-20b" and data.expected_vocab_size == 50_277
    # a YAML round trip (what the launch page and the CLI do) keeps the spec
    assert type(spec).from_yaml(spec.to_yaml()) == spec


def test_paper_model_flops_include_the_gpt_neox_head():
    n_params, flops = model_info("85M", 512, 50_277)
    assert n_params == 84_934_656 and flops == 797_907_456
    assert model_info("85M", 512)[1] == 566_231_040 + 6 * 768 * 8192  # the default BPE's vocabulary


def test_the_dry_run_measures_a_gpu_at_a_reference_trials_micro_batch():
    """bf16 at the micro-batch a B_ref trial will run (not fp32 at B ≤ 32). 151M at GPT-NeoX's
    vocabulary (padded to 50,304): 0.52 GB a sequence, 8.1 GB of weights, moments and averages."""
    from cbscore.study import load_preset
    from cbscore.study.estimate import gpu_measure_batch

    spec = load_preset("paper-chinchilla")
    assert spec.b_ref == 256 and spec.micro_batch_size is None
    # an H200: 0.8·(139e9 − 8.1e9) / 0.522e9 = 200 sequences fit; the largest divisor of 256 below: 128
    assert gpu_measure_batch(spec, "151M", 139e9, vocab_size=50_277) == 128
    # 40 GB: 0.8·31.9e9 / 0.522e9 = 48 → 32
    assert gpu_measure_batch(spec, "151M", 40e9, vocab_size=50_277) == 32
    assert gpu_measure_batch(spec.replace(micro_batch_size=64), "151M", 1e9) == 64
    assert gpu_measure_batch(spec.replace(devices_per_trial=2), "151M", 139e9, vocab_size=50_277) == 128

"""`cbs train` and `cbs models` from the command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cbs import build_parser, main
from cbscore.cli.train import MODELS_JSON_KEYS, TRAIN_JSON_KEYS, build_config, token_count


def _cbs(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from cbs import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)


def test_cbs_train_reaches_a_target_on_the_builtin_corpus(builtin_store):
    proc = _cbs(
        "train", "--model", "tiny-0.1M", "--batch-size", "8", "--context", "32", "--lr", "2e-2",
        "--max-tokens", "64k", "--target-loss", "6.5", "--ewa-tau", "0.9", "--eval-windows", "16",
        "--device", "cpu", "--threads", "1", "--json",
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1  # exactly one JSON object on stdout; the progress bar went to stderr
    out = json.loads(lines[0])
    assert tuple(out) == TRAIN_JSON_KEYS
    assert out["status"] == "reached"
    assert out["final_eval_loss"] <= 6.5
    assert 0 < out["steps_to_target"] <= out["steps"] < 250
    assert out["tokens_to_target"] == pytest.approx(out["steps_to_target"] * 8 * 32)
    assert out["tokens"] == out["steps"] * 256
    assert out["mfu"] is None and out["tokens_per_s"] > 0
    assert out["n_params"] == 98_304 and out["flops_per_token"] == 6 * (98_304 + 64 * 8192) + 12 * 2 * 64 * 32  # LM head at V = 8192
    assert "tok" in proc.stderr
    assert out["gns_b_simple"] is None  # one pass per batch: nothing to compare


def test_cbs_models_json_lists_presets_with_exact_keys(capsys):
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(tuple(r) == MODELS_JSON_KEYS for r in rows)
    by_name = {r["name"]: r for r in rows}
    assert by_name["85M"]["n_params"] == 84_934_656
    assert by_name["85M"]["flops_per_token"] == 6 * (84_934_656 + 768 * 8192) + 12 * 12 * 768 * 512
    assert (by_name["1.2B"]["d_model"], by_name["1.2B"]["n_layers"], by_name["1.2B"]["n_heads"]) == (2048, 24, 32)


def test_cbs_models_table_names_every_preset(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name in ("tiny-0.1M", "tiny-0.8M", "85M", "151M", "302M", "604M", "1.2B"):
        assert name in out


def test_cbs_train_rejects_a_micro_batch_that_does_not_divide(capsys):
    code = main(["train", "--model", "tiny-0.1M", "--batch-size", "8", "--micro-batch-size", "3",
                 "--lr", "1e-2", "--max-tokens", "1M", "--device", "cpu"])
    assert code == 2
    assert "micro_batch_size: must divide batch_size=8, but got 3." in capsys.readouterr().err


def test_cbs_train_rejects_an_unknown_model(capsys):
    code = main(["train", "--model", "gpt-5", "--batch-size", "8", "--lr", "1e-2", "--max-tokens", "1M"])
    assert code == 2
    assert "model: is not a model preset" in capsys.readouterr().err


def test_token_counts_accept_suffixes():
    assert token_count("2000000") == token_count("2e6") == token_count("2M") == 2_000_000
    assert token_count("1.741B") == 1_741_000_000
    with pytest.raises(Exception, match="but got '2.5'"):
        token_count("2.5")


def test_cbs_train_measures_the_noise_scale_on_request(builtin_store):
    proc = _cbs(
        "train", "--model", "tiny-0.1M", "--batch-size", "8", "--context", "32", "--lr", "2e-2",
        "--max-tokens", "16k", "--ewa-tau", "0.9", "--eval-windows", "16", "--gns-micro-batch-size", "2",
        "--device", "cpu", "--threads", "1", "--json",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[0])
    assert out["status"] == "finished" and out["gns_b_simple"] > 0
    bad = _cbs("train", "--model", "tiny-0.1M", "--batch-size", "8", "--lr", "1e-2", "--max-tokens", "16k",
               "--gns-micro-batch-size", "3")
    assert bad.returncode == 2 and "gns_micro_batch_size: must divide batch_size=8, but got 3." in bad.stderr


def test_cbs_train_alone_takes_the_fixed_recipe_with_the_run_as_its_own_reference():
    # 97 steps of 8 × 32 tokens: the middle τ keeps 5.913% of the run (5.74 steps), not the paper
    # table's τ = 0.9995 (1,386 steps); β2 = 0.95^(1/8) at B_ref = B (cbscore.recipe.trial_recipe).
    args = build_parser().parse_args(["train", "--model", "tiny-0.1M", "--batch-size", "8", "--context", "32",
                                      "--lr", "2e-2", "--max-tokens", str(97 * 256)])
    config = build_config(args)
    assert config.total_steps == 97
    assert config.resolved_ewa_taus() == (0.785304, 0.886174, 0.941368)
    assert config.resolved_beta2() == 0.993609
    given = build_config(build_parser().parse_args(
        ["train", "--model", "tiny-0.1M", "--batch-size", "8", "--lr", "2e-2", "--max-tokens", "1M",
         "--beta2", "0.99", "--ewa-tau", "0.9"]))
    assert given.resolved_beta2() == 0.99 and given.resolved_ewa_taus() == (0.9,)


def test_cbs_train_summary_names_the_recipe_and_its_bounds(builtin_store):
    proc = _cbs(
        "train", "--model", "tiny-0.1M", "--batch-size", "8", "--context", "32", "--lr", "2e-2",
        "--max-tokens", str(97 * 256), "--eval-windows", "8", "--device", "cpu", "--threads", "1", "--no-progress",
    )
    assert proc.returncode == 0, proc.stderr
    assert "(EWA τ 0.785304, 0.886174, 0.941368)" in proc.stdout
    assert ("recipe       `fixed`, this run its own reference (B_ref = 8, D = 24,832 tokens): β2 0.993609, "
            "τ 0.785304, 0.886174, 0.941368 (half-lives 2.87/5.74/11.5 steps); β2 horizon floor (0.95 at 8·B_ref)"
            in proc.stdout)

"""Study specs: validation names the field and the value; the wire format round-trips."""

from __future__ import annotations

import math

import pytest

from cbscore.errors import ConfigError
from cbscore.study import PRESET_NAMES, StudySpec, estimate, grid_tokens, grid_trials, load_preset


def small_spec(**changes) -> StudySpec:
    base = dict(name="t", kind="custom", settings=[{"model": "tiny-0.1M", "tokens": 100_000}],
                batch_sizes=[4, 8, 16, 32], b_ref=8, context_tokens=32, search={"kind": "grid", "lrs": [0.01, 0.03]})
    base.update(changes)
    return StudySpec.from_dict(base)


@pytest.mark.parametrize(
    "changes, field, value",
    [
        ({"batch_sizes": [4, 0, 8]}, "batch_sizes", "0"),
        ({"batch_sizes": [4, 8.5, 8]}, "batch_sizes", "8.5"),
        ({"batch_sizes": [4, "x", 8]}, "batch_sizes", "'x'"),
        ({"micro_batch_size": 3}, "micro_batch_size", "3"),
        ({"devices_per_trial": 3}, "devices_per_trial", "3"),
        ({"devices_per_trial": 0}, "devices_per_trial", "0"),
        ({"settings": [{"model": "gpt-9000", "tokens": 10}]}, "settings[0].model", "'gpt-9000'"),
        ({"search": {"kind": "grid", "lrs": [0.01, -1.0]}}, "search.lrs", "-1.0"),
        ({"search": {"kind": "grid", "lrs": [0.01, 0.0]}}, "search.lrs", "0.0"),
        ({"b_ref": 64}, "b_ref", "64"),
        ({"name": "bad name!"}, "name", "'bad name!'"),
        ({"kind": "sideways"}, "kind", "'sideways'"),
        ({"target_losses": {"tiny-0.1M_D100K": math.nan}}, "target_losses.tiny-0.1M_D100K", "nan"),
        ({"target_losses": {"tiny-0.1M_D100K": "low"}}, "target_losses.tiny-0.1M_D100K", "'low'"),
        ({"overhead": -0.2}, "overhead", "-0.2"),
        ({"colour": "red"}, "colour", "'red'"),
    ],
)
def test_bad_spec_is_refused_naming_field_and_value(changes, field, value):
    with pytest.raises(ConfigError) as info:
        small_spec(**changes)
    message = str(info.value)
    assert message.startswith(f"{field}:"), message
    assert f"but got {value}" in message, message


def test_fixed_n_takes_exactly_one_model():
    with pytest.raises(ConfigError, match=r"^models: a fixed_n study takes exactly one model"):
        StudySpec(name="x", kind="fixed_n", models=("tiny-0.1M", "tiny-0.8M"), tokens=(10, 20), batch_sizes=(8,), b_ref=8)


def test_round_trip_through_dict_and_yaml():
    spec = small_spec(target_losses={"tiny-0.1M_D100K": 5.5}, ewa_taus=[0.99, 0.999], micro_batch_size=4)
    assert StudySpec.from_dict(spec.to_dict()) == spec
    assert StudySpec.from_yaml(spec.to_yaml()) == spec


def test_settings_of_each_kind():
    chin = StudySpec(name="c", kind="chinchilla", models=("tiny-0.1M", "tiny-0.8M"), batch_sizes=(8,), b_ref=8)
    assert [(s.model, s.tokens) for s in chin.resolve_settings()] == [("tiny-0.1M", 20 * 98_304), ("tiny-0.8M", 20 * 786_432)]
    fixed_n = StudySpec(name="n", kind="fixed_n", models=("tiny-0.1M",), tokens=(1000, 2000), batch_sizes=(8,), b_ref=8)
    assert [s.setting_id for s in fixed_n.resolve_settings()] == ["tiny-0.1M_D1K", "tiny-0.1M_D2K"]
    fixed_d = StudySpec(name="d", kind="fixed_d", models=("tiny-0.1M", "tiny-0.8M"), tokens=(5000,), batch_sizes=(8,), b_ref=8)
    assert [s.n_params for s in fixed_d.resolve_settings()] == [98_304, 786_432]


def test_presets_load_and_paper_budgets_match_design():
    assert set(PRESET_NAMES) == {"demo", "local-demo", "reproduce", "reproduce-gpu", "paper-chinchilla", "paper-fixed-n",
                                 "paper-fixed-d", "ablation-schedule", "ablation-schedule-gpu", "ablation-context",
                                 "ablation-context-gpu", "ablation-width-depth", "ablation-width-depth-gpu"}
    for name in PRESET_NAMES:
        assert load_preset(name).name == name
    chin = load_preset("paper-chinchilla")
    assert [s.tokens for s in chin.resolve_settings()] == [1_741_000_000, 3_072_000_000, 6_144_000_000,
                                                           12_288_000_000, 24_576_000_000]
    assert chin.batch_sizes == (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
    assert load_preset("demo", name="mine").name == "mine"
    with pytest.raises(ConfigError, match="^preset: "):
        load_preset("nope")


def test_grid_tokens_and_trials_known_answer():
    spec = small_spec()
    # 2 lrs × 4 batch sizes; the reference cell (B=8) spends 1.25·D = 125,000 (it must be able to
    # cross its target, the fitted loss at D, after D), B=4 below it 1.25·D, and the cells above it
    # 1.25·S(B_ref) = ceil(1.25 × 390) = 488 steps of B·32 tokens.
    assert grid_trials(spec) == 8
    per_lr = 125_000 + 125_000 + 488 * 16 * 32 + 488 * 32 * 32
    assert grid_tokens(spec) == 2 * per_lr
    est = estimate(spec, tokens_per_s=1000.0, n_workers=2)
    assert est.tokens == 2 * per_lr and est.cells == 4 and est.trials == 8
    assert est.seconds == pytest.approx(per_lr / 1000.0)
    assert est.flops == pytest.approx(2 * per_lr * spec.resolve_settings()[0].flops_per_token)


def test_study_above_sanity_limit_is_flagged():
    est = estimate(small_spec(max_trials=5))
    assert est.over_limit == "8 trials exceed max_trials=5"


def test_a_one_line_path_string_is_yaml_text_never_a_file(tmp_path):
    """Text pasted in the web page is parsed as YAML, never opened as a server path (issue 12):
    a file holding a secret is not read back through the error message."""
    secret = tmp_path / "secret.yaml"
    secret.write_text("name: hunter2-is-the-password\nsettings: [{model: tiny-0.1M, tokens: 1000}]\n"
                      "batch_sizes: [8]\nb_ref: 8\n")
    with pytest.raises(ConfigError) as err:
        StudySpec.from_yaml(str(secret))
    assert "hunter2" not in str(err.value) and str(err.value).startswith("spec: ")
    from pathlib import Path
    assert StudySpec.from_yaml(Path(secret)).name == "hunter2-is-the-password"  # an explicit Path is a file


def test_a_name_with_a_trailing_newline_is_refused():
    with pytest.raises(ConfigError, match="^name: "):
        StudySpec(name="demo\n", kind="custom", settings=[{"model": "tiny-0.1M", "tokens": 1000}],
                  batch_sizes=(8,), b_ref=8)


@pytest.mark.parametrize("kind, extra", [
    ("custom", {}), ("fixed_n", {"models": ["tiny-0.1M"], "tokens": [50_000, 400_000]}),
    ("fixed_d", {"models": ["tiny-0.1M", "tiny-0.3M"], "tokens": [50_000]}),
    ("chinchilla", {"models": ["tiny-0.1M", "tiny-0.3M"]}),
])
def test_recipe_defaults_to_fixed_for_every_kind(kind, extra):
    # one recipe per batch size for the whole study (cbscore.recipe): with one D (fixed_d) it is
    # the same as `scaled`; elsewhere it keeps the recipe out of the exponents
    changes = {"kind": kind, "settings": [], **extra} if extra else {}
    assert small_spec(**changes).recipe == "fixed"


def test_recipe_rules_are_checked_naming_the_field_and_keep_through_yaml():
    with pytest.raises(ConfigError, match=r"^recipe: must be one of fixed, scaled, paper_table, but got 'linear'"):
        small_spec(recipe="linear")
    for rule in ("fixed", "scaled", "paper_table"):
        spec = small_spec(recipe=rule)
        assert StudySpec.from_yaml(spec.to_yaml()).recipe == rule

"""The paper's per-batch-size β2 and τ, the nearest-column rule off the table, and the `fixed` and
`scaled` rules that carry it to any T, B and D with their floors and ceiling."""

from __future__ import annotations

import pytest

from cbscore.recipe import (
    BETA2_RANGE,
    TABLE_BATCH_SIZES,
    TAU_MIN_HALF_LIFE_STEPS,
    half_life_steps,
    paper_beta2,
    paper_ewa_tau,
    reference_d_tokens,
    spec_recipe,
    study_recipe,
    trial_recipe,
)
from cbscore.study import StudySpec
from cbscore.study.presets import load_preset


@pytest.mark.parametrize(
    ("batch_size", "beta2", "tau"),
    [(64, 0.999, 0.9995), (256, 0.995, 0.9995), (512, 0.99, 0.9995), (1024, 0.99, 0.999),
     (2048, 0.95, 0.998), (4096, 0.95, 0.995), (8192, 0.95, 0.99), (16384, 0.95, 0.99)],
)
def test_table_entries_are_the_papers(batch_size, beta2, tau):
    assert paper_beta2(batch_size) == beta2
    assert paper_ewa_tau(batch_size) == tau


@pytest.mark.parametrize(
    ("batch_size", "column"),
    [(1, 64), (16, 64), (90, 64), (91, 128), (180, 128), (182, 256), (1500, 2048), (1400, 1024), (10**6, 16384)],
)
def test_off_table_batch_sizes_take_the_nearest_column_in_log2(batch_size, column):
    # the log2 midpoint of 64 and 128 is 90.5; of 128 and 256, 181.0; of 1024 and 2048, 1448.2
    assert paper_beta2(batch_size) == paper_beta2(column)
    assert paper_ewa_tau(batch_size) == paper_ewa_tau(column)


# --------------------------------------------------------------------------- the fixed and scaled rules
# (issue 19) Known answers are derived in the comments from the table's half-lives: the middle τ of
# column 256 keeps 5.913% of D, β2's horizon floor is 13.51 steps (β2 = 0.95) at 8·B_ref sequences.

PAPER = dict(context_tokens=512, d_tokens=3_072_000_000, b_ref=256)


@pytest.mark.parametrize("rule", ["fixed", "scaled"])
@pytest.mark.parametrize("batch_size", TABLE_BATCH_SIZES)
def test_rules_give_back_the_table_at_the_papers_scale(rule, batch_size):
    r = study_recipe(rule, batch_size=batch_size, d_ref_tokens=PAPER["d_tokens"], **PAPER)
    assert r.beta2 == paper_beta2(batch_size)
    assert r.ewa_taus[1] == paper_ewa_tau(batch_size)
    # ×½ and ×2 the middle half-life beside it, and no floor or ceiling is needed at this scale
    assert [half_life_steps(t) / half_life_steps(r.ewa_taus[1]) for t in r.ewa_taus] == pytest.approx(
        [0.5, 1, 2], rel=1e-3)
    assert r.bounds == ()


def test_reference_d_is_the_geometric_centre_of_the_settings_d():
    assert reference_d_tokens([50_000, 141_000, 400_000, 50_000, 50_000]) == 141_421  # √(50k·400k)
    assert reference_d_tokens([3_072_000_000] * 5) == 3_072_000_000
    with pytest.raises(ValueError, match="but got"):
        reference_d_tokens([])


def test_fixed_recipe_of_the_reproduce_preset_has_the_hand_derived_values():
    spec = load_preset("reproduce")  # T = 128, B_ref = 4, D = 31.25k … 500k: D_ref = √(31,250·500,000) = 125,000
    # B = 4 (column 4·256/4 = 256): τ half-life 0.05913 × 125,000 / 512 = 14.44 steps, ×½ and ×2 beside
    # it (0.5^(1/7.22), 0.5^(1/14.44), 0.5^(1/28.87)); β2's share (0.59% of D_ref, 1.4 steps) is below the
    # horizon floor 13.51 · 32 · 128 tokens = 108 steps: β2 = 0.95^(1/8).
    r = spec_recipe(spec, batch_size=4, d_tokens=31_250)
    assert r.beta2 == round(0.95 ** (1 / 8), 6) == 0.993609
    assert r.ewa_taus == (0.908442, 0.953122, 0.97628)
    assert r.bounds == ("β2 horizon floor (0.95 at 8·B_ref)",)
    # the same at every D of the study (`fixed`: D_ref, not the setting's D)
    assert spec_recipe(spec, batch_size=4, d_tokens=500_000) == r
    # B = 32 (column 2048): τ 0.1182 × 125,000 / 4096 = 3.6 steps → the 4-step floor (2, 4, 8 steps);
    # β2 = 0.95 exactly at 8·B_ref = 32 sequences (the horizon floor).
    r = spec_recipe(spec, batch_size=32, d_tokens=78_750)
    assert r.beta2 == 0.95
    assert r.ewa_taus == (0.707107, 0.840896, 0.917004)
    assert r.bounds == ("β2 horizon floor (0.95 at 8·B_ref)", f"τ floor {TAU_MIN_HALF_LIFE_STEPS:g} steps")


def test_fixed_recipe_of_a_fixed_n_study_is_identical_across_its_d():
    spec = StudySpec.from_dict(dict(name="n", kind="fixed_n", models=["tiny-0.1M"], tokens=[50_000, 141_000, 400_000],
                                    batch_sizes=[2, 4, 8, 16, 32, 64], b_ref=2, context_tokens=128))
    assert spec.recipe == "fixed"
    for b in spec.batch_sizes:
        recipes = {spec_recipe(spec, batch_size=b, d_tokens=s.tokens) for s in spec.resolve_settings()}
        assert len(recipes) == 1
    # while `scaled` moves with D (the confound `fixed` removes)
    scaled = spec.replace(recipe="scaled")
    assert len({spec_recipe(scaled, batch_size=2, d_tokens=s.tokens).ewa_taus for s in scaled.resolve_settings()}) == 3


def test_small_batches_get_a_larger_beta2_from_a_horizon_kept_in_tokens():
    # At CPU scale β2 is the floor 0.95 at 8·B_ref and above, 0.95^(B / (8·B_ref)) below it
    # (Marek et al. 2025: β2's half-life held in tokens), within the ceiling 0.999.
    betas = [study_recipe("fixed", batch_size=b, context_tokens=128, d_tokens=141_421, b_ref=2).beta2
             for b in (2, 4, 8, 16, 32, 64)]
    assert betas == [round(0.95 ** (b / 16), 6) for b in (2, 4, 8)] + [0.95, 0.95, 0.95]
    assert betas == sorted(betas, reverse=True) and betas[0] > betas[3]
    # B_ref / 16: 0.95^(1/128) = 0.9996 passes the ceiling
    r = study_recipe("fixed", batch_size=1, context_tokens=128, d_tokens=50_000, b_ref=16)
    assert r.beta2 == BETA2_RANGE[1] == 0.999 and "β2 ceiling 0.999" in r.bounds


@pytest.mark.parametrize("name", ["reproduce", "demo", "reproduce-gpu"])
def test_three_distinct_taus_with_a_half_life_of_at_least_the_floor_in_every_cell(name):
    spec = load_preset(name)
    for setting in spec.resolve_settings():
        for b in spec.batch_sizes:
            taus = spec_recipe(spec, batch_size=b, d_tokens=setting.tokens).ewa_taus
            assert len(set(taus)) == 3
            assert half_life_steps(taus[1]) >= TAU_MIN_HALF_LIFE_STEPS * (1 - 1e-4)


def test_a_lone_trial_is_its_own_reference_run():
    # `cbs train`, B = 8, T = 32, a 97-step budget: the middle τ keeps 5.913% of the run, 5.74 steps,
    # not the 1,386 of the paper's τ = 0.9995; β2 = 0.95^(1/8) at B_ref = B.
    r = trial_recipe(batch_size=8, context_tokens=32, d_tokens=97 * 256)
    assert r.ewa_taus == (0.785304, 0.886174, 0.941368)
    assert half_life_steps(r.ewa_taus[1]) == pytest.approx(0.059133 * 97, rel=1e-4)
    assert r.beta2 == 0.993609


def test_unknown_rule_is_refused_with_the_value():
    with pytest.raises(ValueError, match="but got 'linear'"):
        study_recipe("linear", batch_size=8, context_tokens=32, d_tokens=1000, b_ref=8)

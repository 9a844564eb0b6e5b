"""The chained bracket (``search.kind: chained``, issue 40): each cell brackets its optimal rate from
its neighbour's best, outward from B_ref."""

from __future__ import annotations

import math

import pytest

from cbscore.errors import ConfigError
from cbscore.study import StudySpec, TrialRecord, plan
from cbscore.study.budgets import cell_size, grid_trials
from cbscore.study.chained import bracket, chain_centres, chained_rates, describe_chained
from cbscore.study.simulate import SimConfig, TruthCurve, format_report, simulate
from cbscore.study.trials import lr_tag

GRID = (0.002, 0.004, 0.008, 0.016, 0.032)


def chained_spec(**search) -> StudySpec:
    """A chained study whose reference cell runs ``GRID`` unless ``search`` says otherwise."""
    search = {"reference_rates": "grid", **search}
    return StudySpec.from_dict(dict(
        name="chain", kind="custom", settings=[{"model": "tiny-0.1M", "tokens": 2_000_000}],
        batch_sizes=[4, 8, 16, 32, 64], b_ref=16, context_tokens=128,
        search={"kind": "chained", "lrs": list(GRID), **search}))


def _tid(spec: StudySpec, b: int, lr: float, seed: int = 0) -> str:
    sid = spec.resolve_settings()[0].setting_id
    return f"{spec.name}.{sid}.b{b}.{lr_tag(lr)}.s{seed}"


def _reached(spec: StudySpec, b: int, lr: float, steps: float | None, seed: int = 0,
             status: str = "reached") -> TrialRecord:
    sid = spec.resolve_settings()[0].setting_id
    return TrialRecord(trial_id=_tid(spec, b, lr, seed), cell_id=f"{sid}.b{b}", setting_id=sid, role="trial",
                       batch_size=b, lr=lr, status=status if steps is not None or status != "reached" else "censored",
                       seed=seed, steps_to_target=steps, last_step=int(steps or 500))


def _reference(spec: StudySpec, best: float) -> list[TrialRecord]:
    """The reference cell ended, every rate to its budget, ``best`` the lowest final loss."""
    sid = spec.resolve_settings()[0].setting_id
    return [TrialRecord(trial_id=_tid(spec, 16, lr), cell_id=f"{sid}.b16", setting_id=sid, role="reference",
                        batch_size=16, lr=lr, status="finished", seed=0,
                        final_eval_loss=3.0 + 0.1 * math.log(lr / best) ** 2, last_step=1000,
                        eval_steps=(500.0, 1000.0), eval_losses=(3.5, 3.0 + 0.1 * math.log(lr / best) ** 2))
            for lr in GRID]


def test_a_chained_cell_runs_three_rates_around_its_centre_and_waits_for_them():
    spec = chained_spec()
    assert bracket(spec, 0.01) == (0.005, 0.01, 0.02)
    assert chained_rates(spec, [], 0.01) == ((0.005, 0.01, 0.02), True)
    running = [_reached(spec, 32, 0.005, 90.0), _reached(spec, 32, 0.01, None, status="running")]
    assert chained_rates(spec, running, 0.01) == ((0.005, 0.01, 0.02), True)


def test_an_edge_adds_a_rate_only_when_it_beats_its_inner_neighbour_by_the_gain():
    spec = chained_spec()
    # The low edge 5% better than the middle: bracketed, no extension (k ≈ 0.2 puts both edges ~10% behind).
    near = [_reached(spec, 32, 0.005, 100.0), _reached(spec, 32, 0.01, 105.0), _reached(spec, 32, 0.02, 130.0)]
    assert chained_rates(spec, near, 0.01) == ((0.005, 0.01, 0.02), False)
    # 105/90 − 1 = 17% > 10%: the next rate past the low edge, by the same ratio.
    far = [_reached(spec, 32, 0.005, 90.0), _reached(spec, 32, 0.01, 105.0), _reached(spec, 32, 0.02, 130.0)]
    assert chained_rates(spec, far, 0.01) == ((0.0025, 0.005, 0.01, 0.02), True)
    # It beats 0.005 by 12.5% again: a second; then the cell is at max_extensions (2) and stops.
    again = far + [_reached(spec, 32, 0.0025, 80.0)]
    assert chained_rates(spec, again, 0.01) == ((0.00125, 0.0025, 0.005, 0.01, 0.02), True)
    done = again + [_reached(spec, 32, 0.00125, 70.0)]
    assert chained_rates(spec, done, 0.01) == ((0.00125, 0.0025, 0.005, 0.01, 0.02), False)
    # A gain of 0.2 does not extend past the first edge (17% < 20%).
    assert chained_rates(chained_spec(extension_gain=0.2), far, 0.01)[1] is False


def test_a_diverged_edge_brackets_the_optimum_and_a_crossing_edge_beats_a_middle_that_never_crossed():
    spec = chained_spec()
    diverged = [_reached(spec, 32, 0.005, 130.0), _reached(spec, 32, 0.01, 120.0),
                _reached(spec, 32, 0.02, None, status="diverged")]
    assert chained_rates(spec, diverged, 0.01) == ((0.005, 0.01, 0.02), False)
    censored_middle = [_reached(spec, 32, 0.005, None, status="censored"),
                       _reached(spec, 32, 0.01, None, status="censored"), _reached(spec, 32, 0.02, 120.0)]
    assert chained_rates(spec, censored_middle, 0.01) == ((0.005, 0.01, 0.02, 0.04), True)


def test_centres_move_outward_from_the_reference_by_the_square_root_rule():
    spec = chained_spec()
    ref = _reference(spec, best=0.008)
    # Nothing ended yet: no cell but the reference has a centre.
    assert chain_centres(spec, {16: ref[:2]}) == {}
    centres = chain_centres(spec, {16: ref})
    assert centres == {32: pytest.approx(0.0113), 8: pytest.approx(0.00566)}
    # B = 32 settled with its best at its high edge, bracketed (0.0226 beats 0.0113 by under 10%):
    # B = 64 is centred at √2 times that.
    cell = [_reached(spec, 32, 0.00565, 130.0), _reached(spec, 32, 0.0113, 105.0), _reached(spec, 32, 0.0226, 100.0)]
    centres = chain_centres(spec, {16: ref, 32: cell})
    assert centres[64] == pytest.approx(0.0226 * math.sqrt(2), rel=3e-3)
    # A cell with no crossing hands its own centre on.
    lost = [_reached(spec, 32, lr, None, status="censored") for lr in (0.00565, 0.0113, 0.0226)]
    assert chain_centres(spec, {16: ref, 32: lost})[64] == pytest.approx(0.0113 * math.sqrt(2), rel=3e-3)
    # chain_exponent 0.3: the same neighbour, a smaller step.
    assert chain_centres(chained_spec(chain_exponent=0.3), {16: ref})[32] == pytest.approx(0.008 * 2 ** 0.3, rel=3e-3)


def test_the_planner_releases_cells_outward_from_b_ref_once_the_neighbour_settled():
    spec = chained_spec().replace(pinned_targets={"tiny-0.1M_D2M": 3.2})
    first = plan(spec, [], 0.0)
    assert {t.batch_size for t in first.start} == {16} and len(first.start) == len(GRID)
    p = plan(spec, _reference(spec, best=0.008), 0.0)
    started = {(t.batch_size, t.lr) for t in p.start}
    assert started == {(32, 0.00565), (32, 0.0113), (32, 0.0226), (8, 0.00283), (8, 0.00566), (8, 0.0113)}
    # The centre first (its best crosses early; the edges are its neighbours, never pruned).
    assert [t.lr for t in p.start if t.batch_size == 32][0] == 0.0113
    cells = {c.batch_size: c for c in p.cells}
    assert cells[4].state == "waiting" and cells[64].state == "waiting"
    assert cells[32].n_trials == 3 and "centred at 0.0113" in cells[32].rates_note


def test_a_chained_study_plans_fewer_trials_than_the_grid_and_says_how_in_the_dry_run():
    spec = chained_spec()
    grid = spec.replace(search={"kind": "grid", "lrs": list(GRID)})
    assert cell_size(spec, 16) == 5 and cell_size(spec, 32) == 3
    assert grid_trials(spec) == 5 + 4 * 3 and grid_trials(grid) == 5 * 5
    text = "\n".join(describe_chained(spec))
    assert "up 16 → 32 → 64" in text and "down 16 → 8 → 4" in text and "10%" in text


@pytest.mark.parametrize("field,value", [("bracket_ratio", 1.0), ("extension_gain", -0.1), ("max_extensions", 9),
                                         ("chain_exponent", 0), ("max_extensions", True)])
def test_the_chained_fields_are_checked_by_name(field, value):
    with pytest.raises(ConfigError, match=f"search.{field}") as err:
        chained_spec(**{field: value})
    assert str(value) in str(err.value)


def test_a_stored_grid_spec_stays_a_grid_and_chained_round_trips():
    spec = chained_spec(bracket_ratio=3.0)
    again = StudySpec.from_dict(spec.to_dict())
    assert again == spec and again.search.kind == "chained" and again.search.bracket_ratio == 3.0
    old = spec.to_dict()
    old["search"] = {k: v for k, v in old["search"].items()
                     if k not in ("chain_exponent", "bracket_ratio", "extension_gain", "max_extensions")}
    old["search"]["kind"] = "grid"
    assert StudySpec.from_dict(old).search.kind == "grid"


def test_the_chained_bracket_finds_b_star_at_zero_noise_for_fewer_tokens():
    """σ = 0, η* ∝ √B and a rate that falls again past 4·B_ref: B* within 0.5% of the truth, for at
    most two thirds of the grid's tokens."""
    spec = chained_spec().replace(batch_sizes=[2 ** k for k in range(2, 11)])
    grid = spec.replace(search={"kind": "grid", "lrs": list(GRID)})
    truth = {spec.resolve_settings()[0].setting_id: TruthCurve(s_min=100.0, b_noise=64.0)}
    for config in (SimConfig(noise_sigma=0.0, lr_penalty=0.198),
                   SimConfig(noise_sigma=0.0, lr_penalty=0.198, lr_peak_batch=64)):
        on, off = simulate(spec, truth, config), simulate(grid, truth, config)
        s = on.summary()[0]
        assert s["cbs_study_median"] == pytest.approx(s["cbs_truth"], rel=0.005)
        assert on.to_json_dict()["tokens_study_mean"] < 0.67 * off.to_json_dict()["tokens_study_mean"]
        assert on.to_json_dict()["search"] == "chained (reference grid)" and off.to_json_dict()["search"] == "grid"
    assert "search.kind chained (reference grid)" in format_report(on)


def test_a_bracketed_reference_cell_runs_three_rates_around_the_grids_middle():
    spec = chained_spec(reference_rates="bracket")
    assert StudySpec.from_dict({**spec.to_dict(), "search": {"kind": "chained", "lrs": list(GRID)}}) == spec  # the default
    first = plan(spec, [], 0.0)
    assert sorted(t.lr for t in first.start) == [0.004, 0.008, 0.016]  # the middle of GRID, a factor 2 apart
    assert cell_size(spec, 16) == 3 and grid_trials(spec) == 5 * 3
    assert "runs 0.004, 0.008, 0.016" in "\n".join(describe_chained(spec))
    with pytest.raises(ConfigError, match="search.reference_rates"):
        chained_spec(reference_rates="three")


def test_the_dry_run_of_the_committed_chained_spec_says_how_its_cells_are_centred(capsys, tmp_path, monkeypatch):
    from pathlib import Path

    from cbs import main

    monkeypatch.setenv("CBS_HOME", str(tmp_path))
    spec = Path(__file__).resolve().parents[3] / "docs/results/cheaper-search/spec-chained.yaml"
    assert main(["study", "launch", str(spec), "--dry-run", "--tokens-per-s", "20000"]) == 0
    out = capsys.readouterr().out
    # Three settings: 3 reference rates at B_ref = 2 and 3 rates in each of the 4 cells above it.
    assert "15 cells, 45 trials (chained search)" in out and "first wave: 9 reference trials" in out
    assert "cells released outward from B_ref once the neighbour settled: up 2 → 4 → 8 → 16 → 32" in out


def test_with_explicit_targets_b_ref_is_a_chained_cell_centred_at_the_grids_middle():
    spec = chained_spec().replace(target_losses={"tiny-0.1M_D2M": 3.2})
    first = plan(spec, [], 0.0)
    # No reference runs: B_ref runs the bracket around the geometric middle of GRID (0.008), the
    # other cells wait for it.
    assert sorted((t.batch_size, t.lr) for t in first.start) == [(16, 0.004), (16, 0.008), (16, 0.016)]
    assert all(t.role == "trial" and t.target_loss == 3.2 for t in first.start)

"""Which cells' fastest learning rate sits at the edge of the rates the cell ran (summary.json's
``best_learning_rates``): the planner extends a cell past the spec's grid, so the spec's grid alone
is not the edge (the issue-27 report flagged six bracketed cells that way)."""

from __future__ import annotations

from app.report import best_learning_rates
from cbscore.analysis import StepsRow
from cbscore.study.lr_predict import allowed_rates

GRID = (0.003, 0.006, 0.012)


def _row(b: int, lr: float, steps: float | None, outcome: str = "reached") -> StepsRow:
    return StepsRow(setting="s", batch_size=b, lr=lr, steps=steps, outcome=outcome, tau=0.99)


def test_an_extension_past_the_grid_brackets_a_best_rate_at_the_grids_end():
    allowed = allowed_rates(GRID, 1)
    above = max(allowed)
    assert above > max(GRID)
    rows = [
        # B = 4: best at the grid's top, the extension above it ran and lost: bracketed
        _row(4, 0.006, 120), _row(4, 0.012, 100), _row(4, above, 130),
        # B = 8: best at the extension itself: the top of what ran and of what is allowed
        _row(8, 0.006, 90), _row(8, 0.012, 80), _row(8, above, 70),
        # B = 16: best at the bottom of what ran; a pruned rate counts as run, a failed one does not
        _row(16, 0.003, 40), _row(16, 0.006, None, "pruned"), _row(16, 0.0015, None, "failed"),
        # B = 32: one rate only
        _row(32, 0.006, 20),
    ]
    got = {r["batch_size"]: r for r in best_learning_rates(rows, allowed)}
    assert got[4]["best_lr"] == 0.012 and got[4]["at_grid_edge"] is None and not got[4]["allowed_edge"]
    assert got[8]["at_grid_edge"] == "highest" and got[8]["allowed_edge"]
    assert got[16]["at_grid_edge"] == "lowest" and got[16]["rates_run"] == [0.003, 0.006]
    assert not got[16]["allowed_edge"]  # 0.0015 (an extension below) is allowed, so the cell could go lower
    assert got[32]["at_grid_edge"] == "only"


def test_a_cell_without_a_reached_trial_has_no_entry():
    rows = [_row(4, 0.006, None, "censored"), _row(8, 0.006, 10)]
    assert [r["batch_size"] for r in best_learning_rates(rows, GRID)] == [8]



def test_a_chained_study_gets_best_rates_edged_by_its_cells_own_rates_and_optuna_none():
    """``summary.json`` gives best rates for every search that names each trial's rate
    (``search.runs_rates``, issue 40): a chained cell's rates follow its neighbour's best, so it has
    no allowed bound; a grid keeps its own; an Optuna study has none."""
    from app.report import study_best_rates
    from cbscore.study import load_preset

    demo = load_preset("demo")
    rows = [_row(8, 0.012, 90), _row(8, 0.024, 80), _row(8, 0.048, 85),  # bracketed
            _row(16, 0.017, 60), _row(16, 0.034, 50), _row(16, 0.068, 45)]  # best at its top
    chained = study_best_rates(demo.replace(search={**demo.to_dict()["search"], "kind": "chained"}), rows)
    got = {r["batch_size"]: r for r in chained}
    assert got[8]["best_lr"] == 0.024 and got[8]["at_grid_edge"] is None and not got[8]["allowed_edge"]
    assert got[16]["at_grid_edge"] == "highest" and not got[16]["allowed_edge"]
    grid = {r["batch_size"]: r for r in study_best_rates(demo, [_row(8, 0.012, 90), _row(8, max(allowed_rates(demo.search.lrs, demo.search.lr_extensions)), 80)])}
    assert grid[8]["allowed_edge"]  # the grid's top extension: no study of this spec goes higher
    assert study_best_rates(demo.replace(search={"kind": "optuna"}), rows) is None


def test_a_schedule_study_whose_rates_move_with_b_has_no_allowed_edge():
    """A schedule study scales its rates with B (``decay.lr_exponent``): no one set is allowed at
    every B, so no best rate is at an allowed edge; with the exponent 0 its grid is, as any grid's."""
    import dataclasses

    from app.report import study_best_rates
    from cbscore.study import load_preset

    spec = load_preset("ablation-schedule")
    top = max(allowed_rates(spec.search.lrs, spec.search.lr_extensions))
    rows = [_row(8, 0.006, 90), _row(8, top, 80)]
    assert spec.decay.lr_exponent == 0.5
    assert [r["allowed_edge"] for r in study_best_rates(spec, rows)] == [False]
    fixed = spec.replace(decay=dataclasses.replace(spec.decay, lr_exponent=0.0))
    assert [r["allowed_edge"] for r in study_best_rates(fixed, rows)] == [True]


def test_each_seeds_best_rate_is_listed_beside_the_cells_fastest_trial():
    """The cell's fastest trial is one seed's: with two seeds whose best rates sit at opposite edges (the
    ablation-schedule run at B = 8: 0.012 in seed 0, 0.006 in seed 1, within 1.3%), ``at_grid_edge``
    reads one of them, and ``seeds`` says both."""
    rows = [StepsRow(setting="s", batch_size=8, lr=lr, steps=steps, seed=seed, tau=0.99)
            for seed, lr, steps in ((0, 0.006, 282.6), (0, 0.0085, 264.3), (0, 0.012, 264.0),
                                    (1, 0.006, 238.5), (1, 0.0085, 240.6), (1, 0.012, 267.1))]
    (cell,) = best_learning_rates(rows, ())
    assert cell["best_lr"] == 0.006 and cell["at_grid_edge"] == "lowest"
    assert [(s["seed"], s["best_lr"], s["at_grid_edge"]) for s in cell["seeds"]] == [(0, 0.012, "highest"),
                                                                                     (1, 0.006, "lowest")]
    # rows without a seed: no per-seed entries
    (cell,) = best_learning_rates([_row(8, 0.006, 90), _row(8, 0.012, 80)], ())
    assert cell["seeds"] == []

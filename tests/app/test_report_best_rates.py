"""Which cells' fastest learning rate sits at the edge of the rates the cell ran (summary.json's
``best_learning_rates``): the planner extends a cell past the spec's grid, so the spec's grid alone
is not the edge (the issue-27 report flagged six bracketed cells that way)."""

from __future__ import annotations

from app.report import best_learning_rates
from cbscore.study.lr_predict import allowed_rates

GRID = (0.003, 0.006, 0.012)


def _row(b: int, lr: float, steps: float | None, outcome: str = "reached") -> dict:
    return {"setting": "s", "batch_size": b, "lr": lr, "steps": steps, "outcome": outcome, "tau": 0.99}


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

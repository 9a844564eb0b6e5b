"""Steps to target of trials stopped early, projected from their curves (issue 20)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cbscore.analysis import EvalHistory, TrialSteps, measure_points, project_pruned, steps_ratio
from cbscore.analysis._rows import normalize_row
from cbscore.errors import ConfigError


def curve(need: float, upto: float, every: float = 50.0):
    """A power-law curve L = 3 + 0.2·ln(need/s) evaluated every ``every`` steps to ``upto``."""
    steps = np.arange(every, upto + 1, every)
    return tuple(float(s) for s in steps), tuple(float(3.0 + 0.2 * math.log(need / s)) for s in steps)


def test_a_curve_slower_by_a_factor_in_time_projects_exactly():
    lead = curve(1000.0, 1000.0)
    slow = curve(1300.0, 400.0)  # stopped at 40% of the leader's steps
    assert steps_ratio(*slow, *lead) == pytest.approx(1.3, rel=1e-9)
    # Not enough of its losses reached by the leader: no projection.
    assert steps_ratio(slow[0][:1], slow[1][:1], *lead) is None


def test_projected_trials_join_the_fit_in_place_of_their_crossings():
    # One cell, three rates; the middle one crossed at 1000 steps, the others would at 1100 / 1210.
    lrs, needs = (0.005, 0.01, 0.02), (1100.0, 1000.0, 1210.0)
    full = [TrialSteps(batch_size=8, outcome="reached", steps=n, lr=lr, seed=0) for lr, n in zip(lrs, needs)]
    stopped = [full[1]] + [TrialSteps(batch_size=8, outcome="pruned", lr=lr, seed=0) for lr in (lrs[0], lrs[2])]
    histories = [EvalHistory(batch_size=8, steps=curve(n, n if lr == 0.01 else 300.0)[0],
                             losses=curve(n, n if lr == 0.01 else 300.0)[1], lr=lr, seed=0,
                             outcome="reached" if lr == 0.01 else "pruned") for lr, n in zip(lrs, needs)]
    projected = project_pruned(stopped, histories)
    assert [t.steps_projected for t in projected] == [None, pytest.approx(1100.0), pytest.approx(1210.0)]
    # A second cell with the same shape gives the fit its shared curvature.
    other = [TrialSteps(batch_size=16, outcome="reached", steps=n / 2, lr=lr, seed=0) for lr, n in zip(lrs, needs)]
    got = measure_points(projected + other)[0]
    want = measure_points(full + other)[0]
    assert got.steps == pytest.approx(want.steps, rel=1e-9)
    assert got.steps < 1000.0  # the parabola's optimum, not the best rate's own steps
    assert measure_points(stopped + other)[0].steps == 1000.0  # without projections: the best alone


def test_steps_projected_belongs_to_pruned_trials_only():
    with pytest.raises(ConfigError, match="steps_projected"):
        TrialSteps(batch_size=8, outcome="reached", steps=10.0, steps_projected=12.0)
    with pytest.raises(ConfigError, match="steps_projected"):
        TrialSteps(batch_size=8, outcome="pruned", steps_projected=-1.0)
    row = normalize_row({"setting": "a", "batch_size": 8, "steps": "", "outcome": "pruned",
                         "steps_projected": "123.5"}, "row 1")
    assert row["steps_projected"] == 123.5
    with pytest.raises(Exception, match="steps_projected"):
        normalize_row({"setting": "a", "batch_size": 8, "steps": "", "outcome": "pruned",
                       "steps_projected": "nan"}, "row 1")

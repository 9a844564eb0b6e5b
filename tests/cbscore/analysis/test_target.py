"""The target loss from the whole reference cell (cbscore/analysis/_target.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cbscore.analysis import EvalHistory, analyze_setting, reference_target, target_draws
from cbscore.analysis._target import EDGE, QUADRATIC, best_over_rates, loss_at, retarget
from cbscore.errors import FitError

LRS = (0.003, 0.006, 0.012, 0.024, 0.048)


def test_loss_at_reads_a_straight_line_in_log_step_exactly():
    steps = np.arange(10, 201, 10.0)
    losses = 3.0 - 0.5 * np.log(steps / 100.0)
    loss, stderr, n = loss_at(steps, losses, 150.0)
    assert loss == pytest.approx(3.0 - 0.5 * math.log(1.5), abs=1e-12)
    assert stderr == pytest.approx(0.0, abs=1e-9) and n >= 3


def test_loss_at_refuses_a_run_that_stopped_before_d_or_diverged():
    assert loss_at([10, 20, 30], [4.0, 3.5, 3.2], 100.0) is None
    assert loss_at([50, 100], [4.0, math.nan], 100.0) is None


def test_best_over_rates_reads_the_vertex_between_grid_points_and_flags_an_edge():
    best = 0.009  # between two grid rates
    losses = [3.0 + 0.2 * math.log(lr / best) ** 2 for lr in LRS]
    value, method, lr = best_over_rates(LRS, losses)
    assert method == QUADRATIC and value == pytest.approx(3.0, abs=1e-12) and lr == pytest.approx(best)
    assert value < min(losses)
    edge = [3.0 + 0.2 * math.log(lr / 0.1) ** 2 for lr in LRS]
    assert best_over_rates(LRS, edge) == (min(edge), EDGE, 0.048)


def _run(lr, seed, rng, sigma_eval, d_steps=200.0):
    steps = d_steps / 40 * np.arange(1, 51)  # the 40th evaluation is at D, the run goes on to 1.25·D
    speed = 1.0 + 0.02 * math.log(lr / 0.012) ** 2  # neighbouring rates within the noise of each other
    losses = 3.0 + ((steps / (speed * d_steps)) ** -0.5 - 1.0) + sigma_eval * rng.standard_normal(steps.size)
    return EvalHistory(batch_size=2, steps=steps, losses=losses, lr=lr, seed=seed, role="reference")


def test_reference_target_is_not_biased_low_like_the_best_final_loss():
    """The best rate's true loss at D is 3.0. Over 200 draws of evaluation noise (σ = 0.01), the
    minimum of the five final evaluations sits below it; the target from the whole cell
    does not."""
    rng = np.random.default_rng(0)
    new, old = [], []
    for _ in range(200):
        runs = [_run(lr, 0, rng, 0.01) for lr in LRS]
        new.append(reference_target(runs, 200.0).value)
        old.append(min(r.losses[39] for r in runs))
    bias_old, bias_new = np.mean(old) - 3.0, np.mean(new) - 3.0
    assert bias_old < -0.004
    assert abs(bias_new) < 0.5 * abs(bias_old)


def test_reference_target_averages_seeds_and_refuses_a_cell_without_a_loss_at_d():
    rng = np.random.default_rng(1)
    runs = [_run(lr, seed, rng, 0.0) for lr in LRS for seed in (0, 1)]
    target = reference_target(runs, 200.0)
    assert len(target.seed_values) == 2 and target.value == pytest.approx(3.0, abs=1e-3)
    draws = target_draws(target, 50, np.random.default_rng(0))
    assert draws.shape == (50,) and np.all(np.isfinite(draws))
    with pytest.raises(FitError, match="no reference run"):
        reference_target([EvalHistory(batch_size=2, steps=(10, 20), losses=(4.0, 3.9))], 200.0)


def test_retarget_extrapolates_a_trial_stopped_at_the_old_target_and_keeps_pruned_ones():
    steps = np.array([50.0, 100.0, 150.0, 200.0])
    losses = 3.0 - 0.5 * np.log(steps / 200.0)  # stopped at 200 on reaching 3.0
    h = EvalHistory(batch_size=8, steps=steps, losses=losses, lr=0.01, seed=0, outcome="reached")
    assert retarget(h, 3.1).steps == pytest.approx(200.0 * math.exp(-0.2), rel=0.01)  # the crossing rule
    assert retarget(h, 2.95).steps == pytest.approx(200.0 * math.exp(0.1), rel=1e-9)  # beyond 200
    assert retarget(h, 2.5).outcome == "censored"  # too far to extrapolate
    pruned = EvalHistory(batch_size=8, steps=steps, losses=losses + 1.0, outcome="pruned")
    assert retarget(pruned, 3.0).outcome == "pruned"


def test_analyze_setting_with_histories_redraws_the_target_inside_the_intervals():
    from tests.cbscore.analysis.test_reference_point import CONTEXT, D_TOKENS, study_histories

    histories, trials, _ = study_histories(seed=3, fast=1.0, sigma_eval=0.004)
    common = dict(tokens=D_TOKENS, context=CONTEXT, b_ref=2, bootstrap=300)
    with_h = analyze_setting("s", trials, histories=histories, **common)
    without = analyze_setting("s", trials, **common)
    assert with_h.bootstrap.target_redrawn and not without.bootstrap.target_redrawn
    assert with_h.target is not None and with_h.cbs == without.cbs
    lo, hi = with_h.cbs_ci
    assert lo <= with_h.cbs <= hi
    assert hi - lo >= 0.95 * (without.cbs_ci[1] - without.cbs_ci[0])
    assert with_h.cbs_without_ref is not None and with_h.cbs_without_ref_ci is not None

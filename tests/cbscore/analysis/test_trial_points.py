import dataclasses
import math

import numpy as np
import pytest

from cbscore.analysis import MeasuredPoint, TrialSteps, edge_phrase, measure_points, trial_steps
from cbscore.errors import ConfigError


def test_trial_steps_reached_interpolates_the_crossing():
    # on a power law (loss 10·step^-0.2) the crossing rule is exact
    t = trial_steps(256, [0, 100, 200], [12.0, 10 * 100 ** -0.2, 10 * 200 ** -0.2], 10 * 150 ** -0.2)
    assert t.outcome == "reached" and t.steps == pytest.approx(150.0)


def test_trial_steps_non_finite_history_is_diverged_and_flat_one_censored():
    assert trial_steps(256, [0, 100], [5.0, math.nan], 2.5).outcome == "diverged"
    assert trial_steps(256, [0, 100], [5.0, math.inf], 2.5).outcome == "diverged"
    censored = trial_steps(256, [0, 100], [5.0, 4.0], 2.5)
    assert censored.outcome == "censored" and censored.steps is None


def test_min_over_reached_trials_and_outcomes_are_counted_not_entered():
    trials = [
        TrialSteps(batch_size=128, steps=900.0),
        TrialSteps(batch_size=128, steps=700.0),
        TrialSteps(batch_size=128, outcome="diverged"),
        TrialSteps(batch_size=64, steps=1500.0),
        TrialSteps(batch_size=64, outcome="censored"),
        TrialSteps(batch_size=64, outcome="pruned"),
        TrialSteps(batch_size=512, outcome="censored"),
    ]
    p64, p128, p512 = measure_points(trials)
    assert p64 == MeasuredPoint(
        batch_size=64, steps=1500.0, trial_steps=(1500.0,), n_trials=3, n_censored=1,
        n_diverged=0, n_other=1, steps_min=1500.0, seed_cells=((None, 1500.0),),
    )
    assert (p128.steps, p128.trial_steps, p128.n_diverged, p128.n_reached) == (700.0, (700.0, 900.0), 1, 2)
    assert p512.steps is None and p512.n_censored == 1 and p512.n_reached == 0


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"batch_size": 0, "steps": 1.0}, "batch_size"),
        ({"batch_size": 64.0, "steps": 1.0}, "batch_size"),
        ({"batch_size": 64, "steps": -1.0}, "steps"),
        ({"batch_size": 64, "steps": math.nan}, "steps"),
        ({"batch_size": 64}, "steps"),
        ({"batch_size": 64, "outcome": "censored", "steps": 10.0}, "steps"),
        ({"batch_size": 64, "outcome": "exploded"}, "outcome"),
    ],
)
def test_trial_steps_rejects_bad_fields_naming_them(kwargs, field):
    with pytest.raises(ConfigError) as info:
        TrialSteps(**kwargs)
    assert info.value.field == field


def _parabola_cells(noise, rates=(1e-3, 2e-3, 4e-3, 8e-3, 16e-3), sizes=(64, 128, 256, 512), k=0.1):
    """Trials whose log S is k·ln²(η/η*) above log S*(B) = log(1000·(1 + 256/B)), η* = 4e-3·√(B/256),
    plus ``noise(B, η)``."""
    trials, truth = [], {}
    for b in sizes:
        s_star = 1000.0 * (1 + 256 / b)
        opt = 4e-3 * math.sqrt(b / 256)
        truth[b] = s_star
        for lr in rates:
            log_s = math.log(s_star) + k * math.log(lr / opt) ** 2 + noise(b, lr)
            trials.append(TrialSteps(batch_size=b, steps=math.exp(log_s), lr=lr, seed=0))
    return trials, truth


def test_the_fit_across_rates_recovers_the_optimum_between_grid_points():
    """Without noise, the parabola through the best rate and its neighbours gives S at the optimum
    (between two rates of the grid), where the minimum over rates is the value at the nearest rate."""
    trials, truth = _parabola_cells(lambda b, lr: 0.0)
    for p in measure_points(trials):
        assert p.estimator == "fit"
        assert p.steps == pytest.approx(truth[p.batch_size], rel=1e-9)
        assert p.steps_min >= p.steps * (1 - 1e-12)
        if p.batch_size == 128:  # η* = 2.83e-3 lies between the rates 2e-3 and 4e-3
            assert p.steps_min > 1.01 * p.steps
        assert p.lr_best == pytest.approx(4e-3 * math.sqrt(p.batch_size / 256), rel=1e-6)
        assert not p.lr_at_edge
    assert [p.steps for p in measure_points(trials, estimator="min")] == [p.steps_min for p in measure_points(trials)]


def test_the_fit_across_rates_is_less_biased_than_the_minimum_under_noise():
    """σ = 0.1 on log S: the minimum over five rates sits well below the truth; the fit's mean error
    is a fraction of it (over 200 draws)."""
    rng = np.random.default_rng(0)
    err_fit, err_min = [], []
    for _ in range(200):
        trials, truth = _parabola_cells(lambda b, lr: 0.1 * rng.standard_normal())
        for p in measure_points(trials):
            err_fit.append(math.log(p.steps / truth[p.batch_size]))
            err_min.append(math.log(p.steps_min / truth[p.batch_size]))
    assert np.mean(err_min) < -0.05
    assert abs(np.mean(err_fit)) < 0.4 * abs(np.mean(err_min))


def test_a_best_rate_at_the_edge_of_the_rates_tried_is_flagged():
    trials, _ = _parabola_cells(lambda b, lr: 0.0, rates=(1e-3, 2e-3, 4e-3), sizes=(1024,))
    (p,) = measure_points(trials)
    assert p.lr_at_edge  # the optimum 8e-3 is above every rate tried
    assert p.lr_best == pytest.approx(4e-3)  # never extrapolated past the rates tried
    diverged = trials + [TrialSteps(batch_size=1024, outcome="diverged", lr=8e-3, seed=0)]
    assert not measure_points(diverged)[0].lr_at_edge  # a diverged rate above brackets it


def test_an_edge_names_its_side_and_how_many_seeds_sit_there():
    """Which edge holds each reached seed's best rate, so the note says which way to extend: seed 0's
    optimum 8e-3 lies above the rates 1e-3..4e-3 (the highest), seed 1's below 2e-3..8e-3 (the lowest)."""
    above, _ = _parabola_cells(lambda b, lr: 0.0, rates=(1e-3, 2e-3, 4e-3), sizes=(1024,))
    below = [TrialSteps(batch_size=1024, steps=1000.0 * (1 + 0.1 * math.log(lr / 1e-3) ** 2), lr=lr, seed=1)
             for lr in (2e-3, 4e-3, 8e-3)]
    inside = [dataclasses.replace(t, seed=2) for t in _parabola_cells(lambda b, lr: 0.0, sizes=(1024,))[0]]
    (p,) = measure_points(above)
    assert p.lr_edge_seeds == ((0, "highest"),) and edge_phrase(p) == "1024 (the highest rate)"
    (p,) = measure_points(above + inside)
    assert p.lr_edge_seeds == ((0, "highest"),) and edge_phrase(p) == "1024 (the highest rate, 1 of 2 seeds)"
    (p,) = measure_points(above + below + inside)
    assert p.lr_edge_seeds == ((0, "highest"), (1, "lowest"))
    assert edge_phrase(p) == "1024 (the highest rate in seed(s) 0, the lowest rate in seed(s) 1, of 3 seeds)"
    (p,) = measure_points(inside)
    assert p.lr_edge_seeds == () and not p.lr_at_edge


def test_an_unknown_estimator_is_refused_by_name():
    with pytest.raises(ConfigError, match="estimator"):
        measure_points([TrialSteps(batch_size=8, steps=10.0)], estimator="median")


def test_a_censored_rate_re_run_at_a_larger_cap_bounds_s_at_the_larger():
    trials = [
        TrialSteps(batch_size=8, outcome="censored", budget_steps=100.0, lr=1e-3, seed=0),
        TrialSteps(batch_size=8, outcome="censored", budget_steps=200.0, lr=1e-3, seed=0),  # its re-run
        TrialSteps(batch_size=8, outcome="censored", budget_steps=150.0, lr=3e-3, seed=0),
    ]
    # S(8) = the better rate's S: 1e-3 needs more than 200 steps, 3e-3 more than 150.
    assert measure_points(trials)[0].steps_lower_bound == 150.0

import math

import numpy as np
import pytest

from cbscore.analysis import MeasuredPoint, bootstrap_steps_fit, fit_steps, percentile_interval
from cbscore.analysis._interval import expanded_tail, student_t_quantile
from cbscore.errors import ConfigError

from .synthetic import PAPER_BATCH_SIZES, curve, noisy_curve


def _points(batch_sizes, trial_lists):
    return [
        MeasuredPoint(
            batch_size=int(b), steps=min(t), trial_steps=tuple(sorted(t)), n_trials=len(t),
            n_censored=0, n_diverged=0, n_other=0,
        )
        for b, t in zip(batch_sizes, trial_lists)
    ]


def _single(batch_sizes, steps):
    return _points(batch_sizes, [[s] for s in steps])


def test_same_seed_same_samples_and_other_seed_other_samples():
    rng = np.random.default_rng(1)
    steps = noisy_curve(PAPER_BATCH_SIZES, 1000.0, 500.0, 0.05, rng)
    fit = fit_steps(PAPER_BATCH_SIZES, steps)
    points = _single(PAPER_BATCH_SIZES, steps)
    one = bootstrap_steps_fit(points, fit, n_resamples=200, seed=7)
    two = bootstrap_steps_fit(points, fit, n_resamples=200, seed=7)
    three = bootstrap_steps_fit(points, fit, n_resamples=200, seed=8)
    assert np.array_equal(one.b_noise_samples, two.b_noise_samples)
    assert not np.array_equal(one.b_noise_samples, three.b_noise_samples)
    assert one.methods == ("residuals",) * 9
    assert one.cbs_samples.shape == (200,)
    with pytest.raises(ValueError):
        one.cbs_samples[0] = 1.0  # frozen


def test_learning_rates_of_a_cell_are_never_resampled():
    # Every batch size has two learning rates, [s, 1.5·s], on the clean curve: S(B) is their
    # minimum, the fit is exact and its residuals are 0. Resampling the learning rates would move
    # S_min up in ~3/4 of resamples; by residuals every resample is the exact curve.
    clean = curve(PAPER_BATCH_SIZES, 1000.0, 500.0)
    trials = [[s, 1.5 * s] for s in clean]
    fit = fit_steps(PAPER_BATCH_SIZES, clean)
    boot = bootstrap_steps_fit(_points(PAPER_BATCH_SIZES, trials), fit, n_resamples=500, seed=0)
    assert boot.methods == ("residuals",) * 9
    np.testing.assert_allclose(boot.s_min_samples, 1000.0, rtol=1e-8)
    assert boot.cbs_ci == pytest.approx((fit.cbs(), fit.cbs()), rel=1e-8)


def _seeded_points(batch_sizes, seed_lists):
    """Points whose S(B) is the geometric mean over seeds (as :func:`measure_points` builds them)."""
    return [
        MeasuredPoint(
            batch_size=int(b), steps=float(np.exp(np.mean(np.log(s)))), trial_steps=tuple(sorted(s)),
            n_trials=len(s), n_censored=0, n_diverged=0, n_other=0, seed_steps=tuple(s),
            seed_cells=tuple(enumerate(s)),
        )
        for b, s in zip(batch_sizes, seed_lists)
    ]


def test_a_shift_common_to_a_seed_across_every_batch_size_leaves_b_noise_exact():
    # Three seeds, each the clean curve times exp(-0.1), 1 or exp(0.1) at EVERY batch size: a
    # seed-common shift scales all S(B) alike, so B_noise = b/a is the same whichever seeds are
    # drawn. Redrawn independently per batch size (the old bootstrap) it gave a wide interval.
    clean = curve(PAPER_BATCH_SIZES, 1000.0, 500.0)
    seeds = [[s * np.exp(-0.1), s, s * np.exp(0.1)] for s in clean]
    points = _seeded_points(PAPER_BATCH_SIZES, seeds)
    fit = fit_steps(PAPER_BATCH_SIZES, [p.steps for p in points])
    assert fit.s_min == pytest.approx(1000.0) and fit.b_noise == pytest.approx(500.0)
    boot = bootstrap_steps_fit(points, fit, n_resamples=500, seed=0)
    assert boot.methods == ("seeds",) * 9
    assert boot.dof == (3 - 1) * (9 - 1)
    assert boot.b_noise_ci == pytest.approx((500.0, 500.0), rel=1e-6)


def test_seed_by_cell_noise_is_redrawn_with_the_tables_degrees_of_freedom():
    # Two seeds with a common shift of 0.3 and independent cell noise: each resample's log S(B)
    # moves by the mean of two draws from the table's residuals scaled by sqrt(n_obs/dof), so its
    # variance is (residual SS / dof)/2, whatever the common shift.
    rng = np.random.default_rng(3)
    clean = curve(PAPER_BATCH_SIZES, 1000.0, 500.0)
    cells = 0.05 * rng.standard_normal((9, 2))
    seeds = [[s * np.exp(0.3 + c[0]), s * np.exp(c[1])] for s, c in zip(clean, cells)]
    points = _seeded_points(PAPER_BATCH_SIZES, seeds)
    fit = fit_steps(PAPER_BATCH_SIZES, [p.steps for p in points])
    boot = bootstrap_steps_fit(points, fit, n_resamples=20_000, seed=0)
    assert boot.dof == 8
    diff = cells[:, 0] - cells[:, 1]
    residual_ss = float(np.sum((diff - diff.mean()) ** 2)) / 2.0  # two-way residuals of 2 seeds: ±(d − d̄)/2
    expected = (residual_ss / 8) / 2.0
    assert np.var(boot.log_s_samples, axis=0) == pytest.approx(np.full(9, expected), rel=0.05)


def test_measured_points_average_seeds_and_take_the_minimum_over_learning_rates():
    from cbscore.analysis import TrialSteps, measure_points

    trials = [
        TrialSteps(batch_size=64, steps=400.0, seed=0), TrialSteps(batch_size=64, steps=300.0, seed=0),
        TrialSteps(batch_size=64, steps=1200.0, seed=1), TrialSteps(batch_size=64, steps=900.0, seed=1),
        TrialSteps(batch_size=64, outcome="censored", seed=2, budget_steps=2000.0),
        TrialSteps(batch_size=128, steps=500.0, seed=0), TrialSteps(batch_size=128, steps=450.0, seed=0),
    ]
    p64, p128 = measure_points(trials)
    # Seed 1 ran at B = 64 alone: its own shift of ln S (3× seed 0's here) is not known apart from
    # S(64), so the seeds' additive fit leaves S(64) at seed 0's (a plain mean over the seeds would
    # carry seed 1's shift into B = 64 only).
    assert p64.seed_steps == (300.0, 900.0) and p64.steps == pytest.approx(300.0)
    both = [t for t in trials if t.seed != 2] + [TrialSteps(batch_size=128, steps=1500.0, seed=1)]
    assert measure_points(both)[0].steps == pytest.approx(np.sqrt(300.0 * 900.0))  # every seed everywhere: the mean
    assert p64.n_seeds == 2 and p64.n_seeds_unreached == 1 and p64.steps_lower_bound is None
    assert p128.seed_steps == () and p128.steps == 450.0 and p128.n_seeds == 1


def test_unresolved_s_min_gives_an_infinite_upper_end():
    # Steps still fall nearly like 1/B with large noise: many resamples fit S_min = 0.
    rng = np.random.default_rng(0)
    b = np.asarray(PAPER_BATCH_SIZES, dtype=float)
    steps = (20.0 + 1e6 / b) * np.exp(0.2 * rng.standard_normal(9))
    fit = fit_steps(b, steps)
    boot = bootstrap_steps_fit(_single(b, steps), fit, n_resamples=500, seed=0)
    assert boot.n_unresolved > 25
    assert math.isinf(boot.cbs_ci[1]) and math.isfinite(boot.cbs_ci[0])


def test_rejects_a_bad_number_of_resamples():
    steps = curve(PAPER_BATCH_SIZES, 1000.0, 500.0)
    fit = fit_steps(PAPER_BATCH_SIZES, steps)
    with pytest.raises(ConfigError, match="bootstrap"):
        bootstrap_steps_fit(_single(PAPER_BATCH_SIZES, steps), fit, n_resamples=0)


def test_percentile_interval_known_answers_and_infinite_tail():
    samples = np.arange(101, dtype=float)  # 0..100
    assert percentile_interval(samples, 0.9) == pytest.approx((5.0, 95.0))
    with_inf = np.concatenate([np.arange(90, dtype=float), np.full(10, np.inf)])
    lo, hi = percentile_interval(with_inf, 0.95)
    assert math.isfinite(lo) and math.isinf(hi)


@pytest.mark.parametrize("dof", [1, 2, 3, 4, 7, 12, 30])
def test_student_t_quantile_matches_scipy(dof):
    from scipy import stats

    assert student_t_quantile(0.975, dof) == pytest.approx(stats.t.ppf(0.975, dof), rel=1e-10)
    assert expanded_tail(0.95, dof) == pytest.approx(stats.norm.cdf(-stats.t.ppf(0.975, dof)), rel=1e-9)

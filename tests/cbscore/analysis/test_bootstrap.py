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


def test_interval_covers_the_truth_in_at_least_90_percent_of_200_seeded_cases():
    s_min, b_noise, r, b_ref = 1000.0, 500.0, 0.2, 256.0
    true_cbs = (1 + r) * b_ref + r * b_noise
    covered = {"s_min": 0, "b_noise": 0, "cbs": 0}
    for seed in range(200):
        rng = np.random.default_rng(seed)
        steps = noisy_curve(PAPER_BATCH_SIZES, s_min, b_noise, 0.05, rng)
        fit = fit_steps(PAPER_BATCH_SIZES, steps)
        boot = bootstrap_steps_fit(_single(PAPER_BATCH_SIZES, steps), fit, n_resamples=1000, seed=seed)
        covered["s_min"] += boot.s_min_ci[0] <= s_min <= boot.s_min_ci[1]
        covered["b_noise"] += boot.b_noise_ci[0] <= b_noise <= boot.b_noise_ci[1]
        covered["cbs"] += boot.cbs_ci[0] <= true_cbs <= boot.cbs_ci[1]
    assert covered["b_noise"] >= 180 and covered["cbs"] >= 180 and covered["s_min"] >= 180, covered


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


def test_several_trials_are_resampled_and_their_minimum_is_s():
    # Only B = 16384 has two trials, [s, 1.5·s]; everywhere else one trial on the clean curve, so
    # the fit is exact and its residuals are 0. A resample's S(16384) is s unless both draws
    # pick the slower trial (probability 1/4): S_min comes back exact in ~3/4 of resamples.
    clean = curve(PAPER_BATCH_SIZES, 1000.0, 500.0)
    trials = [[s] for s in clean[:-1]] + [[clean[-1], 1.5 * clean[-1]]]
    fit = fit_steps(PAPER_BATCH_SIZES, clean)
    boot = bootstrap_steps_fit(_points(PAPER_BATCH_SIZES, trials), fit, n_resamples=4000, seed=0)
    assert boot.methods == ("residuals",) * 8 + ("trials",)
    exact = np.isclose(boot.s_min_samples, 1000.0, rtol=1e-8)
    assert exact.mean() == pytest.approx(0.75, abs=0.03)
    assert np.all(boot.s_min_samples[~exact] > 1000.0)  # the slower trial only raises S_min
    lo, hi = boot.cbs_ci
    assert lo <= fit.cbs() <= hi


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

import math

import numpy as np
import pytest

from cbscore.analysis import cbs_closed_form, fit_steps, steps_model
from cbscore.analysis._logfit import fit_log_linear
from cbscore.errors import ConfigError, FitError

from .synthetic import PAPER_BATCH_SIZES, curve, noisy_curve


def test_noise_free_curve_recovers_s_min_b_noise_and_cbs_exactly():
    fit = fit_steps(PAPER_BATCH_SIZES, curve(PAPER_BATCH_SIZES, s_min=2000.0, b_noise=700.0))
    assert fit.s_min == pytest.approx(2000.0, rel=1e-10)
    assert fit.b_noise == pytest.approx(700.0, rel=1e-10)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12)
    # B* = (1 + r)·B_ref + r·B_noise = 1.2·256 + 0.2·700 = 447.2
    assert fit.cbs() == pytest.approx(447.2, rel=1e-10)
    assert fit.cbs(overhead=0.5, b_ref=512) == pytest.approx(1.5 * 512 + 0.5 * 700, rel=1e-10)
    assert np.allclose(fit.residuals, 0.0, atol=1e-12)
    assert fit(1024.0) == pytest.approx(2000.0 * (1 + 700 / 1024), rel=1e-12)
    assert fit.model is steps_model and fit.params == pytest.approx((2000.0, 1.4e6))


@pytest.mark.parametrize("overhead, b_ref", [(0.2, 256), (0.1, 64), (0.5, 1000), (0.3, 4096)])
def test_closed_form_equals_brute_force_search_on_the_fitted_curve(overhead, b_ref):
    rng = np.random.default_rng(3)
    fit = fit_steps(PAPER_BATCH_SIZES, noisy_curve(PAPER_BATCH_SIZES, 1500.0, 1200.0, 0.05, rng))
    # Largest B on a fine grid whose fitted S(B) is within (1 + r) of linear scaling from B_ref.
    grid = np.linspace(b_ref, 20 * (b_ref + fit.b_noise), 2_000_001)
    ok = fit(grid) <= (1 + overhead) * fit(b_ref) * b_ref / grid
    brute = grid[np.flatnonzero(ok)[-1]]
    step = grid[1] - grid[0]
    assert abs(fit.cbs(overhead, b_ref) - brute) <= step
    assert fit.cbs(overhead, b_ref) == pytest.approx(float(cbs_closed_form(fit.b_noise, b_ref, overhead)))


def test_free_exponent_recovers_alpha_and_its_cbs_solves_the_rule():
    b = np.asarray(PAPER_BATCH_SIZES, dtype=float)
    steps = 1000.0 + 3.0e4 * b**-0.7
    fit = fit_steps(b, steps, free_alpha=True)
    assert (fit.a, fit.b, fit.alpha) == pytest.approx((1000.0, 3.0e4, 0.7), rel=1e-7)
    assert fit.b_noise == pytest.approx(30.0 ** (1 / 0.7), rel=1e-7)
    cbs = fit.cbs(0.2, 256)
    assert cbs * fit(cbs) == pytest.approx(1.2 * 256 * fit(256.0), rel=1e-10)
    # alpha = 1 data: the free fit agrees with the paper's model.
    paper = fit_steps(b, curve(b, 2000.0, 700.0), free_alpha=True)
    assert paper.alpha == pytest.approx(1.0, rel=1e-7)
    assert paper.cbs() == pytest.approx(447.2, rel=1e-6)


def test_batched_solver_matches_scipy_on_noisy_resamples():
    from scipy.optimize import least_squares

    rng = np.random.default_rng(0)
    x = 1.0 / np.asarray(PAPER_BATCH_SIZES, dtype=float)
    log_y = np.log(curve(PAPER_BATCH_SIZES, 1000.0, 500.0)) + 0.1 * rng.standard_normal((20, 9))
    a, b = fit_log_linear(x, log_y)
    for r in range(20):
        ref = least_squares(
            lambda p: log_y[r] - np.log(p[0] + p[1] * x), [1000.0, 5e5],
            bounds=([0, 0], [np.inf, np.inf]), xtol=1e-15, ftol=1e-15, gtol=1e-15,
        )
        assert (a[r], b[r]) == pytest.approx(tuple(ref.x), rel=1e-6)


def test_one_curve_fits_to_the_same_doubles_as_a_row_of_many():
    """fit_log_linear of one row takes a float path (a simulated study fits thousands of single curves):
    each fit must be the very doubles the rows' path gives that row, bounds and noisy shapes included."""
    rng = np.random.default_rng(7)
    for k in range(400):
        batch_sizes = np.sort(rng.uniform(16.0, 1e5, int(rng.integers(3, 20))))
        s = (rng.uniform(0.0, 1e4) * (k % 5 != 0) + rng.uniform(0.0, 1e7) * (k % 7 != 0) / batch_sizes) + 1.0
        log_y = np.log(s) + rng.normal(0.0, [0.001, 0.1, 0.5, 2.0][k % 4], len(s))
        if k % 3 == 0:
            log_y = log_y[::-1].copy()  # rising steps: a bound holds
        x = 1.0 / batch_sizes
        one = fit_log_linear(x, log_y[None, :])
        rows = fit_log_linear(x, np.stack([log_y, log_y[::-1]]))  # (two rows: the rows' path)
        assert one[0].shape == (1,) and one[0].tobytes() == rows[0][:1].tobytes(), k
        assert one[1].tobytes() == rows[1][:1].tobytes(), k


def test_noisy_curves_recover_b_noise_within_ten_percent_on_average():
    errors = []
    for seed in range(100):
        rng = np.random.default_rng(seed)
        steps = noisy_curve(PAPER_BATCH_SIZES, 2000.0, 800.0, 0.05, rng)
        errors.append(abs(fit_steps(PAPER_BATCH_SIZES, steps).b_noise / 800.0 - 1))
    assert np.mean(errors) < 0.10


def test_refuses_fewer_than_three_distinct_batch_sizes():
    with pytest.raises(FitError, match=r"fewer than 3 distinct batch sizes \(got 2\)"):
        fit_steps([64, 128, 128], [300.0, 200.0, 210.0])


@pytest.mark.parametrize("bad", [0.0, -5.0, math.nan, math.inf])
def test_refuses_non_positive_or_non_finite_values(bad):
    with pytest.raises(FitError, match="positive finite"):
        fit_steps([64, 128, 256, 512], [400.0, bad, 200.0, 150.0])
    with pytest.raises(FitError, match="positive finite"):
        fit_steps([64, bad, 256, 512], [400.0, 300.0, 200.0, 150.0])


def test_refuses_a_curve_that_does_not_fall():
    with pytest.raises(FitError, match="does not fall"):
        fit_steps(PAPER_BATCH_SIZES, 1000.0 + 0.1 * np.asarray(PAPER_BATCH_SIZES))
    with pytest.raises(FitError, match="does not fall"):
        fit_steps([64, 128, 256], [500.0, 500.0, 500.0])


def test_refuses_a_curve_still_in_linear_scaling():
    b = np.asarray(PAPER_BATCH_SIZES, dtype=float)
    with pytest.raises(FitError, match="S_min"):
        fit_steps(b, 1e6 / b**1.2)  # falls faster than 1/B: no S_min plateau anywhere


def test_cbs_rejects_bad_settings_naming_the_field():
    fit = fit_steps(PAPER_BATCH_SIZES, curve(PAPER_BATCH_SIZES, 2000.0, 700.0))
    with pytest.raises(ConfigError, match="overhead"):
        fit.cbs(overhead=-0.1)
    with pytest.raises(ConfigError, match="b_ref"):
        fit.cbs(b_ref=math.nan)


def test_lower_bounds_above_the_curve_change_nothing():
    b = [64, 128, 256, 512, 1024]
    s = [1000 * (1 + 500 / x) for x in b]
    plain = fit_steps(b, s)
    bounded = fit_steps(b, s, lower_bounds=[(4096, 900.0)])  # the curve gives 1122 there
    assert not bounded.censored_fit and bounded.lower_bounds == ((4096.0, 900.0),)
    assert (bounded.a, bounded.b) == (plain.a, plain.b)


def test_a_lower_bound_the_least_squares_curve_violates_pulls_the_fit_up_to_it():
    """A censored cell is S(B) > bound: where the curve fitted to the measured points passes below
    the bound, the censored likelihood moves it towards the bound (never dropped, never averaged)."""
    b = [64, 128, 256, 512, 1024]
    noise = [1.0, 1.0, 1.0, 1.04, 0.93]  # the largest measured B drawn fast: S_min fitted low
    s = [1000 * (1 + 500 / x) * f for x, f in zip(b, noise)]
    plain = fit_steps(b, s)
    bound = 1000 * (1 + 500 / 4096)  # the truth at 4096, which the plain fit undershoots
    assert plain(4096) < bound
    bounded = fit_steps(b, s, lower_bounds=[(4096, bound)])
    assert bounded.censored_fit
    assert plain(4096) < bounded(4096)
    assert abs(bounded.b_noise / 500 - 1) < abs(plain.b_noise / 500 - 1)


def test_a_bound_above_a_smaller_batch_sizes_steps_says_only_no_faster_than_there():
    """Steps to target never grow with B (McCandlish et al. 2018, eq. 2.11): a cell censored past the
    steps measured at a smaller batch size is held to those steps, not to its cap."""
    b = [64, 128, 256, 512, 1024]
    s = [1000 * (1 + 500 / x) for x in b]
    fit = fit_steps(b, s, lower_bounds=[(4096, 5000.0)])
    assert fit.lower_bounds == ((4096.0, s[-1]),)  # S(1024) = 1488, not 5000
    assert fit(4096) < s[-1] * 1.05

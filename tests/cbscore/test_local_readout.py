"""Local-CBS readout (Merrill's rule, the noise-aware rule) and the power law over tokens: known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from cbscore.errors import ConfigError, FitError
from cbscore.local import fit_local_cbs_curve, merrill_local_cbs, noise_aware_local_cbs, window_end_loss


def test_merrill_takes_the_largest_k_within_epsilon_of_every_smaller_k():
    r = merrill_local_cbs([1, 2, 4, 8], [3.00, 3.01, 3.03, 3.10], base_batch_size=64, epsilon=0.02)
    assert r.passes == (True, True, False, False)  # k=4 is 0.03 above k=1
    assert (r.k_star, r.local_cbs, r.bracket, r.lower_bound) == (2.0, 128.0, (128.0, 256.0), False)
    # at ε/2 = 0.01 k=2 still passes (0.01 ≤ 0.01); at 2ε = 0.04 k=4 does too: ε decides
    assert (r.k_star_half_tolerance, r.k_star_double_tolerance, r.tolerance_decides) == (2.0, 4.0, True)
    assert r.to_dict()["bracket"] == [128.0, 256.0]


def test_merrill_compares_against_every_smaller_k_not_only_the_neighbour():
    # k=4 is within ε of k=2 (0.015) but 0.025 above k=1: it fails
    assert merrill_local_cbs([1, 2, 4], [3.0, 3.01, 3.025], base_batch_size=8, epsilon=0.02).k_star == 2.0
    # the rule as stated: k=4 passes although k=2 did not (k=2 is 0.05 above k=1, k=4 within 0.01 of both)
    r = merrill_local_cbs([1, 2, 4, 8], [3.0, 3.05, 3.01, 3.2], base_batch_size=8, epsilon=0.02)
    assert r.passes == (True, False, True, False) and r.k_star == 4.0


def test_a_larger_batch_that_ends_lower_passes_and_the_top_of_the_grid_is_a_lower_bound():
    r = merrill_local_cbs([1, 2, 4], [3.0, 2.9, 2.8], base_batch_size=16, epsilon=0.0)
    assert r.k_star == 4.0 and r.bracket == (64.0, None) and r.lower_bound and not r.tolerance_decides


def test_the_noise_aware_rule_sets_each_tolerance_from_the_seed_paired_difference():
    # two seeds (two base runs); k=2 − k=1 per seed: 0.00 and 0.04 → mean 0.02, SE = sd/√2 = 0.02
    losses = [[3.00, 3.00], [3.00, 3.04], [3.05, 3.07]]
    r = noise_aware_local_cbs([1, 2, 4], losses, base_batch_size=32)
    z = 1.6448536269514722
    assert r.tolerances[1] == pytest.approx((z * 0.02,))
    assert r.tolerances[2] == pytest.approx((z * 0.01, z * 0.01))  # k=4 − k=1: 0.05, 0.07; k=4 − k=2: 0.05, 0.03
    assert r.passes == (True, True, False) and r.k_star == 2.0 and r.noise_decides
    # Merrill's one ε of 0.01 on the same means says k* = 1: the noise decides between the two answers
    assert merrill_local_cbs([1, 2, 4], losses, base_batch_size=32, epsilon=0.01).k_star == 1.0
    # a floor above the noise decides instead
    floored = noise_aware_local_cbs([1, 2, 4], losses, base_batch_size=32, epsilon_floor=0.1)
    assert floored.k_star == 4.0 and not floored.noise_decides and floored.tolerances[2] == (0.1, 0.1)


def test_the_noise_aware_rule_takes_each_branchs_own_spread_with_one_seed():
    r = noise_aware_local_cbs([1, 2], [3.0, 3.02], base_batch_size=8, standard_errors=[0.01, 0.01], z=2.0)
    assert r.tolerances[1] == pytest.approx((2.0 * math.sqrt(2) * 0.01,)) and r.k_star == 2.0
    with pytest.raises(ConfigError, match="losses: needs two seeds or more, or standard_errors"):
        noise_aware_local_cbs([1, 2], [3.0, 3.02], base_batch_size=8)


def test_bad_readout_input_names_the_field():
    with pytest.raises(ConfigError, match="multipliers: must be two or more positive numbers, increasing"):
        merrill_local_cbs([2, 1], [3.0, 3.0], base_batch_size=8, epsilon=0.01)
    with pytest.raises(ConfigError, match="losses: must be 3 finite losses per seed"):
        merrill_local_cbs([1, 2, 4], [3.0, float("nan"), 3.0], base_batch_size=8, epsilon=0.01)
    with pytest.raises(ConfigError, match="epsilon: must be a non-negative finite number, but got -0.1"):
        merrill_local_cbs([1, 2], [3.0, 3.0], base_batch_size=8, epsilon=-0.1)


def test_the_window_end_loss_is_the_mean_of_the_last_logged_losses_with_its_spread():
    w = window_end_loss(np.arange(1.0, 11.0), fraction=0.3)  # the last three: 8, 9, 10
    assert (w.mean, w.n) == (9.0, 3) and w.standard_error == pytest.approx(1 / math.sqrt(3))


def test_the_curve_recovers_an_exact_power_law_over_tokens():
    t = np.array([1e6, 1e7, 1e8, 1e9])
    curve = fit_local_cbs_curve(t, 3.0 * t**0.4)
    assert curve.coef == pytest.approx(3.0) and curve.exponent == pytest.approx(0.4) and curve.r2 == pytest.approx(1.0)
    assert curve(1e10) == pytest.approx(3.0 * 1e4) and curve.tokens_at(3.0 * 1e4) == pytest.approx(1e10)


def test_the_curve_interval_is_the_ols_t_interval_on_log_axes():
    t = np.array([1e6, 3e6, 1e7, 3e7, 1e8])
    b = np.array([8.0, 16.0, 24.0, 48.0, 64.0])
    curve = fit_local_cbs_curve(t, b, level=0.9, lower_bounds=[False, False, False, False, True])
    ref = stats.linregress(np.log(t), np.log(b))  # an independent implementation
    q = stats.t.ppf(0.95, df=3)
    assert curve.exponent == pytest.approx(ref.slope)
    assert curve.exponent_ci == pytest.approx((ref.slope - q * ref.stderr, ref.slope + q * ref.stderr))
    assert curve.coef_ci == pytest.approx((math.exp(ref.intercept - q * ref.intercept_stderr),
                                           math.exp(ref.intercept + q * ref.intercept_stderr)))
    assert curve.r2 == pytest.approx(ref.rvalue**2)
    assert any("1e+08 tokens is at the top of its grid" in n for n in curve.notes)


def test_the_curve_says_when_the_data_cannot_support_it():
    two = fit_local_cbs_curve([1e6, 1e7], [8, 16])
    assert two.exponent_ci is None and two.exponent == pytest.approx(math.log10(2)) and "no interval" in two.notes[0]
    with pytest.raises(FitError, match="needs two checkpoints or more, but got 1"):
        fit_local_cbs_curve([1e6], [8])
    with pytest.raises(FitError, match="positive finite"):
        fit_local_cbs_curve([1e6, 1e7], [8, 0])

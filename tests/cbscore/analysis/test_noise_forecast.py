"""The noise-scale forecast of S(B) and B*, and its calibration against measured B_noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cbscore.analysis import (
    analyze_table,
    calibrate,
    forecast_batch_sizes,
    forecast_setting,
    weighted_noise_scale,
)
from cbscore.errors import ConfigError, FitError


def test_constant_noise_scale_gives_mccandlish_curve_through_the_run():
    # B_noise = 30 all along, a run at B = 10 reaching the target at step 400:
    # each step is 1/(1 + 3) ideal steps, so S_min = 100 and E_min = 3000 (eqs. 2.11–2.12)
    b_hat, s_min, e_min = weighted_noise_scale([30.0] * 40, b_run=10, steps=range(10, 401, 10))
    assert (b_hat, s_min, e_min) == pytest.approx((30.0, 100.0, 3000.0))
    f = forecast_setting("s", b_simple=[30.0] * 40, steps=list(range(10, 401, 10)), b_run=10, target_step=None,
                         b_ref=10, overhead=0.2)
    assert f.steps_at(10) == pytest.approx(400.0)  # through the reference run's own point
    assert f.steps_at(1e9) == pytest.approx(100.0, rel=1e-6)  # S_min
    assert f.steps_at(30) == pytest.approx(200.0)  # S_min·(1 + B_noise/B)
    assert f.cbs == pytest.approx(1.2 * 10 + 0.2 * 30)  # DESIGN.md §1 closed form
    # calibrated by c = 2: B_noise 60, still through (10, 400): S_min = 400/7
    assert f.steps_at(60, factor=2.0) == pytest.approx(400 / 7 * 2)


def test_each_value_stands_for_the_steps_since_the_previous_log_up_to_the_target():
    # w = 1/(1 + B/100): 0.5 for 100 over 10 steps, 0.25 for 300 over 30 steps
    b_hat, s_min, _ = weighted_noise_scale([100.0, 300.0], b_run=100, steps=[10, 40])
    assert b_hat == pytest.approx((0.5 * 10 * 100 + 0.25 * 30 * 300) / (0.5 * 10 + 0.25 * 30))  # 220
    assert s_min == pytest.approx(0.5 * 10 + 0.25 * 30)
    # up to a target at step 20 only 10 of the 30 steps of the second value count; after it, none
    b_hat, _, _ = weighted_noise_scale([100.0, 300.0, 5000.0], b_run=100, steps=[10, 40, 60], until_step=20)
    assert b_hat == pytest.approx((0.5 * 10 * 100 + 0.25 * 10 * 300) / (0.5 * 10 + 0.25 * 10))
    # the tracker's warm-up (nan, ≤ 0) is left out; without steps each value is one step (the sum)
    assert weighted_noise_scale([math.nan, 100.0, -1.0, 300.0], b_run=100)[0] == pytest.approx(
        (0.5 * 100 + 0.25 * 300) / 0.75)


def test_forecast_refuses_what_it_cannot_use():
    with pytest.raises(ConfigError, match=r"b_simple: must hold at least one positive"):
        weighted_noise_scale([math.nan, 0.0], b_run=4)
    with pytest.raises(ConfigError, match=r"b_simple: must hold at least one positive"):
        weighted_noise_scale([math.inf], b_run=4, steps=[50])
    with pytest.raises(ConfigError, match=r"steps: must be strictly increasing"):
        weighted_noise_scale([1.0, 2.0], b_run=4, steps=[10, 10])
    with pytest.raises(ConfigError, match=r"b_run: must be a positive finite number, but got 0"):
        weighted_noise_scale([1.0], b_run=0)


def _table(b_noise: dict[str, float], noise: float = 0.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    rows = []
    for setting, bn in b_noise.items():
        for b in (2, 4, 8, 16, 32, 64, 128):
            s = 100.0 * (1 + bn / b) * math.exp(noise * rng.standard_normal())
            rows.append({"setting": setting, "batch_size": b, "steps": s})
    return analyze_table(rows, b_ref=2, overhead=0.2, bootstrap=400, seed=seed)


def _forecast(setting: str, b_hat: float):
    return forecast_setting(setting, b_simple=[b_hat] * 5, steps=[10, 20, 30, 40, 50], b_run=2, target_step=None,
                            b_ref=2, overhead=0.2)


def test_calibration_recovers_a_known_factor_with_an_interval_around_it():
    # measured B_noise is 3× the forecast in every setting, up to 5% noise on S(B)
    truth = {"a": 12.0, "b": 24.0, "c": 40.0}
    analysis = _table(truth, noise=0.05)
    cal = calibrate([_forecast(s, bn / 3.0) for s, bn in truth.items()], analysis.settings, n_resamples=400)
    assert cal.factor == pytest.approx(3.0, rel=0.25)
    lo, hi = cal.factor_ci
    assert lo < cal.factor < hi and lo < 3.0 < hi
    assert [r.setting for r in cal.settings] == ["a", "b", "c"]
    for row in cal.settings:
        assert row.ratio == pytest.approx(row.b_noise / row.b_hat)
    # on exact curves the factor is exact (the geometric mean of exact ratios)
    exact = calibrate([_forecast(s, bn / 3.0) for s, bn in truth.items()], _table(truth).settings, n_resamples=50)
    assert exact.factor == pytest.approx(3.0, rel=1e-6)
    assert exact.to_json_dict()["factor"] == pytest.approx(3.0, rel=1e-6)


def test_calibration_leaves_out_settings_without_a_fit_and_says_so():
    analysis = _table({"a": 12.0})
    cal = calibrate([_forecast("a", 6.0), _forecast("missing", 6.0)], analysis.settings, n_resamples=50)
    assert [r.setting for r in cal.settings] == ["a"]
    assert cal.factor == pytest.approx(2.0, rel=1e-6)
    assert any("missing" in e for e in cal.errors)
    assert calibrate([_forecast("missing", 6.0)], analysis.settings).factor is None


def test_batch_sizes_span_the_forecast_bend():
    assert forecast_batch_sizes(8, [20.0]) == (2, 4, 8, 16, 32, 64, 128)  # up to ≥ 4 × 20
    assert forecast_batch_sizes(2, [0.5]) == (1, 2, 4, 8, 16)  # at least five sizes
    assert forecast_batch_sizes(3, [10.0]) == (3, 6, 12, 24, 48)  # 3 has no halvings
    with pytest.raises(FitError, match="no finite forecast"):
        forecast_batch_sizes(8, [math.nan])

"""Noise-scale and forecast chart builders on known data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app import gns_charts
from app.gns_charts import ForecastOverlay, ForecastPoint


def _trace(fig, prefix):
    matches = [t for t in fig.data if t.name and t.name.startswith(prefix)]
    assert matches, f"no trace named {prefix!r}… in {[t.name for t in fig.data]}"
    return matches[0]


def test_noise_curve_converts_steps_to_tokens_and_drops_warm_up_values():
    curve = gns_charts.noise_curve("lr 0.01", [10, 20, 30, 40], [math.nan, -1.0, 5.0, 7.0], batch_tokens=256)
    assert curve.tokens == (30 * 256, 40 * 256) and curve.b_simple == (5.0, 7.0)
    fig = gns_charts.noise_scale_figure([curve], b_run=2)
    trace = _trace(fig, "lr 0.01")
    assert list(trace.x) == [7680, 10240] and list(trace.y) == [5.0, 7.0]
    assert fig.layout.yaxis.type == "log"
    assert any("B = 2" in (a.text or "") for a in fig.layout.annotations)


def test_forecast_overlay_passes_through_the_reference_point_and_calibrates():
    # reference run at B = 2 reaching the target at step 400 with B̂ = 6: S_min = 100
    overlay = ForecastOverlay(label="D50K", measured=((2, 400.0), (8, 250.0), (32, 150.0)), b_run=2,
                              target_step=400.0, b_hat=6.0, factor=3.0, factor_ci=(2.0, 4.5))
    assert overlay.steps(np.array([2.0]))[0] == pytest.approx(400.0)
    assert overlay.steps(np.array([6.0]))[0] == pytest.approx(200.0)  # S_min·(1 + 6/6)
    # calibrated: B_noise 18, S_min = 400/10 = 40, through (2, 400) too
    assert overlay.steps(np.array([2.0, 18.0]), factor=3.0) == pytest.approx([400.0, 80.0])
    fig = gns_charts.forecast_overlay_figure(overlay)
    raw, cal, measured = _trace(fig, "forecast from"), _trace(fig, "calibrated:"), _trace(fig, "measured")
    assert list(measured.x) == [2, 8, 32]
    assert np.interp(math.log(6.0), np.log(raw.x), raw.y) == pytest.approx(200.0, rel=0.02)
    assert np.interp(math.log(18.0), np.log(cal.x), cal.y) == pytest.approx(80.0, rel=0.02)
    band = _trace(fig, "calibrated, 95%")
    assert band.fill == "toself"
    # without a calibration: the raw forecast alone
    bare = gns_charts.forecast_overlay_figure(ForecastOverlay(label="x", measured=(), b_run=2, target_step=10.0,
                                                              b_hat=1.0))
    assert [t.name.split(" ")[0] for t in bare.data] == ["forecast"]


def test_forecast_vs_measured_places_each_setting_and_the_diagonal():
    points = [ForecastPoint(label="a", forecast=3.0, measured=4.5, measured_ci=(4.0, 6.0), calibrated=4.4),
              ForecastPoint(label="b", forecast=3.2, measured=5.2)]
    fig = gns_charts.forecast_vs_measured_figure(points)
    raw = _trace(fig, "raw forecast")
    assert list(raw.x) == [3.0, 3.2] and list(raw.y) == [4.5, 5.2]
    assert list(raw.error_y.array) == pytest.approx([1.5, 0.0]) and list(raw.error_y.arrayminus) == pytest.approx([0.5, 0.0])
    cal = _trace(fig, "calibrated forecast")
    assert list(cal.x) == [4.4] and list(cal.y) == [4.5]
    diag = _trace(fig, "forecast = measured")
    assert list(diag.x) == list(diag.y)


def test_forecast_points_use_the_pages_b_ref_and_r():
    class Setting:
        def __init__(self, name, cbs, ci):
            self.setting, self.cbs, self.cbs_ci = name, cbs, ci

    forecast = {"settings": [{"setting": "a", "b_hat": 10.0}, {"setting": "unfitted", "b_hat": 3.0}]}
    points = gns_charts.forecast_points(forecast, {"factor": 2.0}, [Setting("a", 7.0, (6.0, 9.0)),
                                                                     Setting("unfitted", None, None)],
                                        b_ref=2, overhead=0.2)
    assert len(points) == 1
    (p,) = points
    assert (p.forecast, p.calibrated, p.measured) == pytest.approx((1.2 * 2 + 0.2 * 10, 1.2 * 2 + 0.2 * 20, 7.0))
    assert p.measured_ci == (6.0, 9.0)

"""Plotly figures of the gradient noise scale and the CBS forecast it gives: data in, figure out.

Pure functions of small frozen inputs, unit-tested without Streamlit or MLflow, like
:mod:`app.charts`. Definitions: ``B_simple = tr Σ / |G|²`` (McCandlish et al. 2018, §2.2, in
sequences, :mod:`cbscore.train.gns`); the forecast ``S(B′) = Ŝ_min·(1 + B̂/B′)`` through the reference
run's own point, calibrated by ``c = B_noise(measured)/B̂`` (:mod:`cbscore.analysis`, module
``_noise_forecast``); ``B* = (1 + r)·B_ref + r·B_noise`` (DESIGN.md §1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from app.charts import PALETTE, _axis, _log2_axis, _rgba, _style, scatter

_GRID = "#E6E9EF"


# --------------------------------------------------------------------------- live noise scale
@dataclass(frozen=True, kw_only=True)
class NoiseCurve:
    """``B_simple`` of one trial against training tokens."""

    label: str
    tokens: tuple[float, ...]
    """Training tokens at each logged value."""
    b_simple: tuple[float, ...]
    """Smoothed ``B_simple`` in sequences (non-finite or non-positive values are not drawn)."""


def noise_curve(label: str, steps: Sequence[float], values: Sequence[float], batch_tokens: int) -> NoiseCurve:
    """A :class:`NoiseCurve` from a ``gns/b_simple`` history (optimizer steps × tokens per step)."""
    keep = [(float(s), float(v)) for s, v in zip(steps, values) if math.isfinite(v) and v > 0]
    return NoiseCurve(label=label, tokens=tuple(s * batch_tokens for s, _ in keep), b_simple=tuple(v for _, v in keep))


def noise_scale_figure(curves: Sequence[NoiseCurve], *, b_run: float | None = None, height: int = 260) -> go.Figure:
    """``B_simple`` (sequences, log₂ axis) against training tokens; the run's batch size as a line."""
    fig = go.Figure()
    values: list[float] = []
    for i, c in enumerate(curves):
        values += list(c.b_simple)
        fig.add_trace(scatter(x=list(c.tokens), y=list(c.b_simple), mode="lines+markers", name=c.label,
                                 line=dict(color=PALETTE[i % len(PALETTE)], width=2), marker=dict(size=4),
                                 hovertemplate="%{x:.4s} tokens<br>B_simple %{y:.3g}<extra>" + c.label + "</extra>"))
    if b_run is not None:
        values.append(b_run)
        fig.add_hline(y=b_run, line=dict(color="#8E98A4", dash="dot", width=1.5),
                      annotation_text=f"B = {b_run:g}", annotation_position="bottom right",
                      annotation_font=dict(size=11, color="#5A6270"))
    return _style(fig, title=None, height=height,
                  xaxis=_axis(title_text="training tokens", gridcolor=_GRID, showline=True, linecolor="#B8BEC7",
                              tickformat=".2s"),
                  yaxis=_axis(title_text="B_simple = tr Σ / |G|² (sequences)", **_log2_axis(values or [1, 2], pad=1.5)))


# --------------------------------------------------------------------------- forecast S(B')
@dataclass(frozen=True, kw_only=True)
class ForecastOverlay:
    """One setting: measured S(B) and the noise-scale forecast of it."""

    label: str
    measured: tuple[tuple[int, float], ...]
    """``(B, S(B))`` measured (reached points)."""
    b_run: float
    """Batch size of the reference run the forecast comes from (sequences)."""
    target_step: float
    """Its steps to the target: the forecast curve passes through ``(b_run, target_step)``."""
    b_hat: float
    """Forecast ``B_noise`` (sequences)."""
    factor: float | None = None
    """Calibration factor ``c``; ``None``: raw forecast only."""
    factor_ci: tuple[float, float] | None = None
    """Interval of ``c`` (drawn as a band)."""

    def steps(self, batch_size: np.ndarray, factor: float = 1.0) -> np.ndarray:
        """``S(B′) = S_min·(1 + c·B̂/B′)`` with ``S_min`` set by the reference point."""
        b_noise = factor * self.b_hat
        s_min = self.target_step / (1.0 + b_noise / self.b_run)
        return s_min * (1.0 + b_noise / np.asarray(batch_size, dtype=float))


def forecast_overlay_figure(overlay: ForecastOverlay, *, height: int = 340) -> go.Figure:
    """Measured S(B) with the raw and the calibrated forecast S(B′) (log₂ axes)."""
    sizes = [b for b, _ in overlay.measured] + [overlay.b_run]
    lo, hi = min(sizes) / 1.25, max(sizes) * 1.25
    grid = np.geomspace(lo, hi, 80)
    fig = go.Figure()
    y_values = [s for _, s in overlay.measured] + [overlay.target_step]
    if overlay.factor is not None and overlay.factor_ci is not None and all(
            math.isfinite(v) and v > 0 for v in overlay.factor_ci):
        low, high = overlay.steps(grid, overlay.factor_ci[0]), overlay.steps(grid, overlay.factor_ci[1])
        fig.add_trace(scatter(x=np.concatenate([grid, grid[::-1]]), y=np.concatenate([high, low[::-1]]),
                                 fill="toself", fillcolor=_rgba(PALETTE[0], 0.12), line=dict(width=0),
                                 name="calibrated, 95% interval of c", hoverinfo="skip"))
    raw = overlay.steps(grid)
    y_values += list(raw)
    fig.add_trace(scatter(x=grid, y=raw, mode="lines", name=f"forecast from B_simple (B̂ = {overlay.b_hat:.3g})",
                             line=dict(color=PALETTE[1], width=2, dash="dash"),
                             hovertemplate="B %{x:.3g}<br>forecast S %{y:.4g}<extra></extra>"))
    if overlay.factor is not None and math.isfinite(overlay.factor):
        cal = overlay.steps(grid, overlay.factor)
        y_values += list(cal)
        fig.add_trace(scatter(x=grid, y=cal, mode="lines", line=dict(color=PALETTE[0], width=2.5),
                                 name=f"calibrated: c·B̂ = {overlay.factor:.3g}·{overlay.b_hat:.3g}",
                                 hovertemplate="B %{x:.3g}<br>calibrated S %{y:.4g}<extra></extra>"))
    if overlay.measured:
        fig.add_trace(scatter(x=[b for b, _ in overlay.measured], y=[s for _, s in overlay.measured],
                                 mode="markers", name="measured S(B)",
                                 marker=dict(color=PALETTE[3], size=10, line=dict(color="white", width=1)),
                                 hovertemplate="B %{x}<br>S %{y:.4g}<extra>measured</extra>"))
    return _style(fig, title=overlay.label, height=height,
                  xaxis=_axis(title_text="batch size B (sequences, log₂)", **_log2_axis([lo, hi])),
                  yaxis=_axis(title_text="steps to target S(B) (log)", type="log", gridcolor=_GRID, showline=True,
                              linecolor="#B8BEC7"))


# --------------------------------------------------------------------------- forecast vs measured B*
@dataclass(frozen=True, kw_only=True)
class ForecastPoint:
    """One setting: forecast and measured ``B*`` (sequences)."""

    label: str
    forecast: float
    """Raw forecast ``(1 + r)·B_ref + r·B̂``."""
    measured: float
    """Fitted ``B*`` of the setting's S(B)."""
    measured_ci: tuple[float, float] | None = None
    calibrated: float | None = None
    """``(1 + r)·B_ref + r·c·B̂``."""


def forecast_vs_measured_figure(points: Sequence[ForecastPoint], *, height: int = 380) -> go.Figure:
    """Measured B* against forecast B* per setting (raw and calibrated), with the line of agreement."""
    fig = go.Figure()
    xs = [p.forecast for p in points] + [p.calibrated for p in points if p.calibrated is not None]
    ys = [p.measured for p in points] + [v for p in points if p.measured_ci for v in p.measured_ci
                                         if math.isfinite(v) and v > 0]
    values = [v for v in xs + ys if v and math.isfinite(v) and v > 0] or [1.0, 2.0]
    lo, hi = min(values) / 1.4, max(values) * 1.4
    fig.add_trace(scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="forecast = measured",
                             line=dict(color="#8E98A4", dash="dot", width=1.5), hoverinfo="skip"))

    def error_y(ps):
        if not any(p.measured_ci for p in ps):
            return None
        return dict(type="data", symmetric=False,
                    array=[(p.measured_ci[1] - p.measured) if p.measured_ci and math.isfinite(p.measured_ci[1]) else 0
                           for p in ps],
                    arrayminus=[(p.measured - p.measured_ci[0]) if p.measured_ci else 0 for p in ps],
                    color=_rgba(PALETTE[3], 0.6), thickness=1.5, width=4)

    fig.add_trace(scatter(x=[p.forecast for p in points], y=[p.measured for p in points], mode="markers",
                             name="raw forecast (B̂ from B_simple)", error_y=error_y(points),
                             marker=dict(color=PALETTE[1], size=10, symbol="circle-open", line=dict(width=2)),
                             hovertext=[p.label for p in points],
                             hovertemplate="%{hovertext}<br>forecast %{x:.3g}<br>measured %{y:.3g}<extra></extra>"))
    cal = [p for p in points if p.calibrated is not None]
    if cal:
        fig.add_trace(scatter(x=[p.calibrated for p in cal], y=[p.measured for p in cal], mode="markers",
                                 name="calibrated forecast (c·B̂)",
                                 marker=dict(color=PALETTE[0], size=11, symbol="diamond",
                                             line=dict(color="white", width=1)),
                                 hovertext=[p.label for p in cal],
                                 hovertemplate="%{hovertext}<br>calibrated %{x:.3g}<br>measured %{y:.3g}<extra></extra>"))
    return _style(fig, title=None, height=height,
                  xaxis=_axis(title_text="forecast B* (sequences, log₂)", **_log2_axis([lo, hi])),
                  yaxis=_axis(title_text="measured B* (sequences, log₂)", **_log2_axis([lo, hi])))


def forecast_points(forecast_json: dict, calibration_json: dict | None, analyses: Sequence, *, b_ref: float,
                    overhead: float) -> list[ForecastPoint]:
    """:class:`ForecastPoint` per setting that has both a forecast and a fitted ``B*``, at the page's
    ``B_ref`` and ``r`` (``forecast_json``/``calibration_json``: the ``cbs study fit --json`` keys)."""
    by_setting = {a.setting: a for a in analyses}
    factor = None if not calibration_json else calibration_json.get("factor")
    out = []
    for f in forecast_json.get("settings", []):
        a = by_setting.get(f["setting"])
        if a is None or a.cbs is None:
            continue
        b_hat = float(f["b_hat"])
        out.append(ForecastPoint(
            label=f["setting"], forecast=(1 + overhead) * b_ref + overhead * b_hat, measured=float(a.cbs),
            measured_ci=None if a.cbs_ci is None else (float(a.cbs_ci[0]), float(a.cbs_ci[1])),
            calibrated=None if factor is None else (1 + overhead) * b_ref + overhead * factor * b_hat))
    return out

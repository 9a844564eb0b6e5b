"""Plotly figures of the least-squares theory page: data in, figure out.

Pure functions of :class:`cbscore.theory.TheoryResult` (or plain numbers), unit-tested without
Streamlit, like :mod:`app.charts`. Definitions: :mod:`cbscore.theory` (the exact risk recursion
and Zhang et al.'s Definition 1 on it); ``B* = (1 + r)·B_ref + r·B_noise`` (DESIGN.md §1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from app.charts import PALETTE, _log2_axis, _style

_GRID = "#E6E9EF"
_LOG = dict(type="log", gridcolor=_GRID, showline=True, linecolor="#B8BEC7", zeroline=False)


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def steps_per_d_figure(result, *, height: int = 420) -> go.Figure:
    """``f(B)`` against ``B`` for each ``D`` (log–log), with the linear-scaling line from ``B_ref``
    (``f(B_ref)·B_ref/B``) dotted beside each and the empirical ``B*`` marked."""
    fig = go.Figure()
    xs: list[float] = []
    for i, s in enumerate(result.settings):
        pts = [(b, f) for b, f in zip(s.batch_sizes, s.steps) if f is not None]
        if not pts:
            continue
        b, f = (np.array(v, dtype=float) for v in zip(*pts))
        xs += list(b)
        name = f"D = {s.d_samples:.3g}"
        fig.add_trace(go.Scatter(x=b, y=f, mode="lines+markers", name=name, legendgroup=name,
                                 line=dict(color=_color(i), width=2), marker=dict(size=6),
                                 hovertemplate="B = %{x}<br>f(B) = %{y:.4g} steps<extra>" + name + "</extra>"))
        ref = dict(zip(s.batch_sizes, s.steps)).get(result.b_ref)
        if ref is not None:
            fig.add_trace(go.Scatter(x=b, y=ref * result.b_ref / b, mode="lines", showlegend=False, legendgroup=name,
                                     line=dict(color=_color(i), width=1, dash="dot"), hoverinfo="skip"))
        if s.cbs_empirical is not None:
            y_star = float(np.exp(np.interp(math.log(s.cbs_empirical), np.log(b), np.log(f))))
            fig.add_trace(go.Scatter(x=[s.cbs_empirical], y=[y_star], mode="markers", showlegend=False,
                                     legendgroup=name, marker=dict(symbol="star", size=13, color=_color(i),
                                                                   line=dict(color="white", width=1)),
                                     hovertemplate="B* = %{x:.4g}<extra>" + name + "</extra>"))
    fig.update_xaxes(title_text="batch size B (samples)", **_log2_axis(xs or [1, 2]))
    fig.update_yaxes(title_text="steps to target f(B)", **_LOG)
    return _style(fig, title=None, height=height)


def law_figure(result, *, height: int = 380) -> go.Figure:
    """``B*`` (read off the points and fitted) and ``B_noise`` against ``D`` on log axes, each with
    its fitted law, and the theory's slopes (averaged and last iterate) drawn through the measured
    ``B*`` at the middle ``D`` (a slope, not a prediction of the level)."""
    fig = go.Figure()
    d_all = np.array([s.d_samples for s in result.settings], dtype=float)
    series = (("cbs_empirical", "B* (points)", 0, "circle"), ("cbs", "B* (fit)", 1, "diamond"),
              ("b_noise", "B_noise", 2, "square"))
    for key, label, ci, symbol in series:
        pts = [(s.d_samples, getattr(s, key)) for s in result.settings if getattr(s, key) is not None]
        if not pts:
            continue
        d, y = (np.array(v, dtype=float) for v in zip(*pts))
        law = result.laws.get(key)
        name = f"{label}" + (f" ∝ D^{law.exponent:.2f}" if law is not None else "")
        fig.add_trace(go.Scatter(x=d, y=y, mode="markers", name=name, legendgroup=key,
                                 marker=dict(size=9, symbol=symbol, color=_color(ci)),
                                 hovertemplate="D = %{x:.4g}<br>%{y:.4g}<extra>" + label + "</extra>"))
        if law is not None:
            fig.add_trace(go.Scatter(x=d_all, y=law(d_all), mode="lines", showlegend=False, legendgroup=key,
                                     line=dict(color=_color(ci), width=1.5), hoverinfo="skip"))
    anchor = [(s.d_samples, s.cbs_empirical) for s in result.settings if s.cbs_empirical is not None]
    if anchor:
        d0, y0 = anchor[len(anchor) // 2]
        for which, dash in (("averaged", "dash"), ("last", "dot")):
            beta = result.theory[which]
            fig.add_trace(go.Scatter(x=d_all, y=y0 * (d_all / d0) ** beta, mode="lines",
                                     name=f"theory, {which} iterate: D^{beta:.2f}",
                                     line=dict(color="#5A6270", width=1.5, dash=dash), hoverinfo="skip"))
    fig.update_xaxes(title_text="data size D (samples)", **_LOG)
    fig.update_yaxes(title_text="batch size (samples)", **_LOG)
    return _style(fig, title=None, height=height)


def loss_curves_figure(result, d_samples: float, *, n_points: int = 200, height: int = 380) -> go.Figure:
    """The risk of the configuration that reached the target first at each ``B`` (for the data size
    ``d_samples``), against samples seen ``t·B``, with the target as a line."""
    (setting,) = [s for s in result.settings if s.d_samples == d_samples]
    fig = go.Figure()
    run = result.run
    for i, (b, steps, best, curves) in enumerate(zip(setting.batch_sizes, setting.steps, setting.best, run.curves)):
        if best is None:
            continue
        curve = curves[best]
        t = np.unique(np.round(np.geomspace(1, max(2.0, 3.0 * steps), n_points)))
        label = f"B = {b}"
        extra = f", τ = {curve.tau:g}" if curve.tau is not None else ""
        fig.add_trace(go.Scatter(x=t * b, y=curve(t), mode="lines", name=label,
                                 line=dict(color=_color(i), width=1.8),
                                 hovertemplate=f"{label}, η = {curve.eta:.3g}{extra}<br>" +
                                 "%{x:.4g} samples<br>R = %{y:.4g}<extra></extra>"))
    fig.add_hline(y=setting.target, line=dict(color="#5A6270", dash="dash", width=1.2),
                  annotation_text=f"target {setting.target:.3g}", annotation_position="top right")
    fig.update_xaxes(title_text="samples seen t·B", **_LOG)
    fig.update_yaxes(title_text="expected excess risk R", **_LOG)
    return _style(fig, title=None, height=height)


def summary_rows(result) -> list[dict]:
    """One row per ``D`` for a table: the target, ``f(B_ref)``, ``B*`` both ways and ``B_noise``."""
    rows = []
    for s in result.settings:
        rows.append({
            "D (samples)": s.d_samples,
            "target R": s.target,
            f"f(B_ref={result.b_ref})": dict(zip(s.batch_sizes, s.steps)).get(result.b_ref),
            "B* (points)": s.cbs_empirical,
            "B_noise": s.b_noise,
            "B* (fit)": s.cbs,
        })
    return rows


def eta_crit_rows(batch_sizes: Sequence[int], eta_crit: Sequence[float]) -> list[dict]:
    """``η_crit(B)`` per batch size, for a small table."""
    return [{"B": int(b), "η_crit": float(e)} for b, e in zip(batch_sizes, eta_crit)]

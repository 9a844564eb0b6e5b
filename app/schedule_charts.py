"""Figures and tables of a ``schedule`` study's readout: data in, figure out.

Pure functions of the readout (:class:`cbscore.study.decay_readout.ScheduleReadout`, what
``cbs study fit NAME`` reads for ``kind: schedule``), unit-tested without Streamlit or MLflow like
:mod:`app.charts`. Definitions: each schedule's S(B) = S_min + b/B fitted on log S, B_noise = b/S_min
(McCandlish et al. 2018, arXiv 1812.06162, eq. 2.11), B* the largest B with S(B) ≤ (1 + r)·S(B_ref)·B_ref/B
(Zhang et al. 2025, §2.2); under WSD the E(S) trade-off E = B·S, classical E = E_min·S/(S − S_min)
(McCandlish et al. 2018, eq. 2.11) and the revised form's quadratic stage E = C·(S − S_opt)² + E_min
(Zhou, Huang et al. 2026, arXiv 2601.05034; :mod:`cbscore.analysis._wsd_fit` says what of it could be
checked).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go

from app.charts import PALETTE, _log2_axis, _style

if TYPE_CHECKING:
    from cbscore.analysis import WsdEsAnalysis
    from cbscore.study.decay_readout import ScheduleFit, ScheduleReadout, StepsCurveFit

#: The order and colour of each schedule, the same on every figure.
SCHEDULE_COLORS = {"constant_ewa": PALETTE[0], "cosine": PALETTE[1], "wsd": PALETTE[2]}


def _color(schedule: str, i: int) -> str:
    return SCHEDULE_COLORS.get(schedule, PALETTE[i % len(PALETTE)])


def steps_figure(readout: ScheduleReadout, *, height: int = 440) -> go.Figure:
    """S(B) per schedule on log axes: the measured points (each schedule against its own target; a WSD or
    cosine point is the first horizon at the target, a constant+EWA point the stable run's crossing), the
    fitted S(B) = S_min + b/B, and each schedule's B* as a diamond on its curve."""
    fig = go.Figure()
    batch = [readout.b_ref] + [p.batch_size for e in readout.schedules.values() for p in e.points]
    lo, hi = min(batch) / 1.25, max(batch) * 1.25
    steps: list[float] = []
    for i, (name, entry) in enumerate(readout.schedules.items()):
        color = _color(name, i)
        pts = [p for p in entry.points if p.steps is not None]
        steps += [p.steps for p in pts]
        fig.add_trace(go.Scatter(
            x=[p.batch_size for p in pts], y=[p.steps for p in pts], mode="markers", name=name,
            legendgroup=name, marker=dict(color=color, size=9),
            customdata=[[p.n_trials, p.n_censored] for p in pts],
            hovertemplate=f"{name}<br>B = %{{x}}<br>S(B) = %{{y:.1f}} steps<br>%{{customdata[0]}} runs, "
                          "%{customdata[1]} censored<extra></extra>"))
        f = entry.fit
        if f is None:
            continue
        grid = np.geomspace(lo, hi, 60)
        curve = f.s_min_steps + f.b_steps_sequences / grid  # S(B) = S_min + b/B
        steps += [float(curve.min()), float(curve.max())]
        fig.add_trace(go.Scatter(x=grid, y=curve, mode="lines", name=f"{name} fit", legendgroup=name,
                                 line=dict(color=color, width=2), showlegend=False,
                                 hovertemplate=f"{name} fit<br>B = %{{x:.3g}}<br>S = %{{y:.1f}}<extra></extra>"))
        if f.cbs is not None:
            fig.add_trace(go.Scatter(x=[f.cbs], y=[f.s_min_steps + f.b_steps_sequences / f.cbs], mode="markers",
                                     name=f"B* ({name})", legendgroup=name, showlegend=False,
                                     marker=dict(symbol="diamond", size=12, color=color, line=dict(color="white", width=1)),
                                     hovertemplate=f"B*({name}) = %{{x:.3g}}<extra></extra>"))
    fig.update_xaxes(title="B (sequences, log)", **_log2_axis([lo, hi]))
    fig.update_yaxes(title="steps to target S(B) (log)", type="log")
    return _style(fig, title=None, height=height)


def fit_rows(readout: ScheduleReadout) -> list[dict]:
    """One row per schedule, side by side: its target, S_min, B_noise and B* with their 95% intervals
    (the columns of the pages' table)."""
    rows = []
    for name, entry in readout.schedules.items():
        f = entry.fit
        ci = (f and f.cbs_ci) or (None, None)
        noise_ci = (f and f.b_noise_ci) or (None, None)
        rows.append({"schedule": name, "target (nats)": entry.target_loss_nats, "runs": len(entry.runs),
                     "S_min (steps)": f and f.s_min_steps, "B_noise": f and f.b_noise, "B_noise low": noise_ci[0],
                     "B_noise high": noise_ci[1], "B*": f and f.cbs, "B* low": ci[0], "B* high": ci[1],
                     "notes": "; ".join(entry.errors)})
    return rows


#: The quantities of :func:`intervals_figure`: label, value and 95% interval of a fit, marker.
_INTERVALS: tuple[tuple[str, Callable[[StepsCurveFit], float | None],
                        Callable[[StepsCurveFit], tuple[float, float] | None], str], ...] = (
    ("B_noise", lambda f: f.b_noise, lambda f: f.b_noise_ci, "circle"),
    ("B*", lambda f: f.cbs, lambda f: f.cbs_ci, "diamond"),
)


def intervals_figure(readout: ScheduleReadout, *, height: int = 360) -> go.Figure:
    """B_noise and B* of each schedule with their 95% intervals, side by side on one log axis."""
    fig = go.Figure()
    values = []
    for j, (label, value_of, ci_of, symbol) in enumerate(_INTERVALS):
        names, xs, lows, highs, colors = [], [], [], [], []
        for i, (name, entry) in enumerate(readout.schedules.items()):
            f = entry.fit
            x = None if f is None else value_of(f)
            if x is None or not math.isfinite(x):
                continue
            ci = ci_of(f) or (x, x)
            names.append(name)
            xs.append(x)
            lows.append(x - ci[0])
            highs.append(ci[1] - x)
            colors.append(_color(name, i))
            values += [v for v in (x, *ci) if v is not None and math.isfinite(v) and v > 0]
        fig.add_trace(go.Scatter(
            x=xs, y=[f"{n}" for n in names], mode="markers", name=label, offsetgroup=str(j),
            marker=dict(symbol=symbol, size=11, color=colors),
            error_x=dict(type="data", symmetric=False, array=highs, arrayminus=lows, thickness=1.5),
            hovertemplate=f"{label} = %{{x:.3g}}<extra>%{{y}}</extra>"))
    fig.update_xaxes(title="batch size (sequences, log; bars: 95% intervals)", **_log2_axis(values or [1], pad=1.3))
    fig.update_yaxes(title=None, type="category")
    return _style(fig, title=None, height=height)


def es_points_of(entry: ScheduleFit) -> tuple[list[float], list[float]]:
    """The WSD readout's ``(B, S)`` points, as ``cbs fit --es`` reads them (each (B, seed)'s fewest steps)."""
    return entry.es_points()


def es_figure(batch_sizes: Sequence[float], steps: Sequence[float], es: WsdEsAnalysis, *, height: int = 420) -> go.Figure:
    """Tokens to target E = B·S (sequences) against steps S under WSD: the points, the classical
    hyperbola and the revised form's quadratic stage, with B_opt's point on the quadratic."""
    from cbscore.analysis._wsd_fit import classical_e, quadratic_e

    s = np.asarray(steps, dtype=float)
    e = np.asarray(batch_sizes, dtype=float) * s
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=s, y=e, mode="markers", name="WSD runs", marker=dict(color=PALETTE[2], size=9),
                             customdata=np.asarray(batch_sizes, dtype=float),
                             hovertemplate="B = %{customdata}<br>S = %{x:.1f}<br>E = %{y:.4g}<extra></extra>"))
    if s.size:
        classical = es.classical
        if classical is not None:
            p = classical.params
            grid = np.geomspace(max(p["s_min"] * 1.02, s.min() / 1.3), s.max() * 1.3, 80)
            fig.add_trace(go.Scatter(x=grid, y=classical_e(grid, p["s_min"], p["e_min"]), mode="lines",
                                     name=f"classical (B_noise = {_g(es.b_noise)})",
                                     line=dict(color=PALETTE[0], width=2)))
        quadratic = es.quadratic
        if quadratic is not None:
            p = quadratic.params
            grid = np.linspace(s.min() / 1.3, s.max() * 1.3, 80)
            fig.add_trace(go.Scatter(x=grid, y=quadratic_e(grid, p["c"], p["s_opt"], p["e_min"]), mode="lines",
                                     name=f"revised, quadratic stage (B_opt = {_g(es.b_opt)}, "
                                          f"B_min = {_g(es.b_min)})",
                                     line=dict(color=PALETTE[3], width=2, dash="dash")))
            fig.add_trace(go.Scatter(x=[p["s_opt"]], y=[p["e_min"]], mode="markers", name="E_min at S_opt",
                                     marker=dict(symbol="diamond", size=12, color=PALETTE[3])))
    fig.update_xaxes(title="steps to target S", type="log")
    fig.update_yaxes(title="sequences to target E = B·S", type="log")
    return _style(fig, title=None, height=height)


def es_rows(es: WsdEsAnalysis) -> list[dict]:
    """The two E(S) forms side by side: parameters, AICc, leave-one-out RMSE of ln E, the batch sizes each gives."""
    rows = []
    for f, label, sizes in ((es.classical, "classical (McCandlish et al. 2018)", {"B_noise": es.b_noise}),
                            (es.quadratic, "revised, quadratic stage (Zhou/Huang et al. 2026)",
                             {"B_opt": es.b_opt, "B_min": es.b_min})):
        row = {"form": label, "parameters": "—" if f is None else ", ".join(f"{k} = {v:.4g}" for k, v in f.params.items()),
               "points": None if f is None else f.n, "AICc": None if f is None else f.aicc,
               "leave-one-out RMSE (ln E)": None if f is None else f.loo_rmse,
               "B_noise": None, "B_opt": None, "B_min": None}
        row.update(sizes)
        rows.append(row)
    return rows


def es_verdict(es: WsdEsAnalysis) -> str:
    """Which form fits better and why, as ``cbs fit --es`` prints it."""
    better = {"classical": "the classical form fits better", "quadratic": "the revised form fits better",
              "undecided": "neither form fits better"}.get(es.better, es.better)
    return f"{better} ({es.reason})"


def _g(x) -> str:
    return "—" if x is None else f"{x:.3g}"

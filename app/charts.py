"""Plotly figure builders for the lab's pages: data in, figure out.

Pure functions of small frozen inputs (no Streamlit, no MLflow), so that every chart is
unit-tested on known data. Definitions follow DESIGN.md §1 and Zhang et al. 2025
(arXiv 2410.21676): ``S(B)`` is steps-to-target at batch size ``B`` (sequences), the fitted curve
is ``S(B) = a + b/B`` (their eq. 2, after McCandlish et al. 2018), linear scaling from ``B_ref`` is
``S_lin(B) = S(B_ref)·B_ref/B`` and the critical batch size ``B*`` is the largest ``B`` with
``S(B) ≤ (1 + r)·S_lin(B)``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

#: Okabe-Ito: a palette that colour-blind readers can tell apart (Okabe & Ito 2008).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#8C6D1F", "#000000")

#: Colour of each trial state on the studies page (statuses of cbscore.study.trials).
STATE_COLORS = {
    "planned": "#EEF0F3",
    "queued": "#C9D1DB",
    "running": "#56B4E9",
    "lost": "#F0B37E",
    "reached": "#009E73",
    "finished": "#5FB79A",
    "censored": "#E69F00",
    "pruned": "#B7A3CF",
    "stopped": "#8E98A4",
    "diverged": "#D55E00",
    "failed": "#8B1E1E",
    "skipped": "#F7F3E3",
}

_FONT = dict(family="Inter, 'Source Sans Pro', 'Helvetica Neue', Arial, sans-serif", size=13, color="#262730")
#: The template of every figure here (_style), validated once by plotly when it was registered.
_TEMPLATE = pio.templates["plotly_white"]
_GRID = "#E6E9EF"


# --------------------------------------------------------------------------- inputs
@dataclass(frozen=True, kw_only=True)
class StepsPoint:
    """One measured batch size of one setting."""

    batch_size: int
    """B in sequences."""
    steps: float
    """S(B): optimizer steps to the target (read off the cell's learning rates); the budget when censored."""
    censored: bool = False
    """No trial at this B reached the target: ``steps`` is only a lower bound."""
    hover: str = ""
    """HTML shown on hover (the best trial: learning rate, β2, τ, run)."""
    run_id: str | None = None
    """MLflow run of the best trial, carried as the point's ``customdata`` (a click opens it)."""


@dataclass(frozen=True, kw_only=True)
class SettingCurve:
    """Steps-to-target of one setting ``(N, D)`` and its fit."""

    label: str
    """Legend label, e.g. ``tiny-0.4M · D 8M``."""
    points: tuple[StepsPoint, ...]
    """Measured batch sizes."""
    fit_a: float | None = None
    """a of ``S(B) = a + b/B`` (= S_min, in steps); ``None`` when the data cannot support a fit."""
    fit_b: float | None = None
    """b of ``S(B) = a + b/B`` (steps·sequences; b/a = B_noise)."""
    b_star: float | None = None
    """Critical batch size B* in sequences (fitted)."""
    b_star_low: float | None = None
    """Lower end of B*'s confidence interval (sequences)."""
    b_star_high: float | None = None
    """Upper end of B*'s confidence interval (sequences)."""

    @property
    def has_fit(self) -> bool:
        return self.fit_a is not None and self.fit_b is not None

    def fitted_steps(self, batch_size: np.ndarray | float) -> np.ndarray | float:
        """``a + b/B`` (steps) at ``batch_size`` (sequences)."""
        return self.fit_a + self.fit_b / np.asarray(batch_size, dtype=float)


@dataclass(frozen=True, kw_only=True)
class PowerLaw:
    """``y = coef · x^exponent`` with x in the units of the chart's axis."""

    label: str
    """Legend label."""
    coef: float
    """Coefficient c (in y units at x = 1 axis unit)."""
    exponent: float
    """Exponent α."""
    exponent_low: float | None = None
    """Lower end of the exponent's confidence interval."""
    exponent_high: float | None = None
    """Upper end of the exponent's confidence interval."""

    def __call__(self, x: np.ndarray | float) -> np.ndarray | float:
        return self.coef * np.asarray(x, dtype=float) ** self.exponent


@dataclass(frozen=True, kw_only=True)
class ScalingPoint:
    """The fitted B* of one setting, placed at its N or D."""

    x: float
    """N or D of the setting, in the axis units."""
    b_star: float
    """B* in sequences."""
    low: float | None = None
    """Lower end of B*'s interval (sequences)."""
    high: float | None = None
    """Upper end of B*'s interval (sequences)."""
    label: str = ""
    """Hover label (the setting)."""


@dataclass(frozen=True, kw_only=True)
class LossCurve:
    """Held-out loss of the averaged weights of one trial against tokens."""

    label: str
    """Legend label (the trial)."""
    tokens: tuple[float, ...]
    """Training tokens at each evaluation."""
    losses: tuple[float, ...]
    """Held-out loss at each evaluation (nats per token)."""


# --------------------------------------------------------------------------- helpers
def scatter(**props) -> dict:
    """A scatter trace as a dict, for ``fig.add_trace``: the figure validates it once as it adds it,
    where a ``go.Scatter`` is validated when built and again when added (the same figure at half
    the cost: the Studies page's overlay of 500 trials spent most of its drawing there)."""
    return dict(type="scatter", **props)


def powers_of_two(low: float, high: float) -> list[int]:
    """Every power of two from the one at or below ``low`` to the one at or above ``high``."""
    if not (low > 0 and high > 0):
        return []
    lo, hi = math.floor(math.log2(min(low, high))), math.ceil(math.log2(max(low, high)))
    return [2**k for k in range(lo, hi + 1)]


def compact(value: float) -> str:
    """Short form of a count for tick labels and hover text: 2048 -> '2048', 65536 -> '65.5k'."""
    value = float(value)
    for unit, scale, start in (("B", 1e9, 1e9), ("M", 1e6, 1e6), ("k", 1e3, 1e4)):
        if abs(value) >= start:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.4g}" if value != int(value) else f"{int(value)}"


def _log2_axis(values: Sequence[float], *, pad: float = 1.0, max_ticks: int = 10) -> dict:
    """Plotly settings of a log axis spanning ``values`` (times ``pad`` either side), ticked at
    powers of two (every other power when there would be more than ``max_ticks``)."""
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    if not values:
        return dict(type="log", gridcolor=_GRID)
    lo, hi = min(values) / pad, max(values) * pad
    ticks = [t for t in powers_of_two(lo, hi) if lo <= t <= hi] or powers_of_two(lo, hi)
    while len(ticks) > max_ticks:
        ticks = ticks[::2]
    return dict(type="log", range=[math.log10(lo), math.log10(hi)], tickvals=ticks,
                ticktext=[compact(t) for t in ticks], gridcolor=_GRID, zeroline=False, showline=True,
                linecolor="#B8BEC7")


def _log10_axis(lo: float, hi: float) -> dict:
    """Plotly settings of a log axis over ``[lo, hi]`` ticked at 1-2-5 (or powers of ten)."""
    k0, k1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    ticks = [m * 10.0**k for k in range(k0, k1 + 1) for m in (1, 2, 5) if lo <= m * 10.0**k <= hi]
    if len(ticks) > 8:
        ticks = [t for t in ticks if f"{t:.0e}".startswith("1")]
    return dict(type="log", range=[math.log10(lo), math.log10(hi)], tickvals=ticks,
                ticktext=[compact(t) for t in ticks], gridcolor=_GRID, showline=True, linecolor="#B8BEC7")


def _merged(layout: dict, update: dict) -> dict:
    """``layout`` updated as plotly's ``update_layout`` updates one: nested settings merged key by
    key; a ``None`` empties the setting (as plotly does a compound one: every key here is one)."""
    for key, value in update.items():
        if value is None:
            layout[key] = {}
        elif isinstance(value, dict) and isinstance(layout.get(key), dict):
            _merged(layout[key], value)
        else:
            layout[key] = copy.deepcopy(value)
    return layout


def _axis(*, title_text: str | None = None, **settings) -> dict:
    """An axis's settings as ``fig.update_xaxes(title_text=..., **settings)`` takes them, for :func:`_style`."""
    return {"title": {"text": title_text}, **settings} if title_text is not None else settings


def _style(fig: go.Figure, *, title: str | None, height: int, xaxis: dict | None = None,
           yaxis: dict | None = None) -> go.Figure:
    """The pages' look (template, font, margins, legend), with ``xaxis`` and ``yaxis`` (:func:`_axis`)."""
    # The layout is set whole, validated once: updated in place (update_layout, update_xaxes), plotly
    # parses every setting's path again in its batch update, most of a small figure's drawing.
    layout = fig.layout.to_plotly_json()
    layout.pop("template", None)
    axes = {k: v for k, v in (("xaxis", xaxis), ("yaxis", yaxis)) if v is not None}
    fig.layout = _merged(layout, dict(
        **axes, font=_FONT, height=height,
        title=dict(text=title, x=0.0, xanchor="left", font=dict(size=15)) if title else None,
        margin=dict(l=64, r=24, t=40 if title else 16, b=40),
        legend=dict(orientation="h", yanchor="top", y=-0.16, xanchor="left", x=0.0, font=dict(size=12)),
        hoverlabel=dict(font=dict(family=_FONT["family"], size=12)),
    ))
    # Set as plotly sets its default template: not validated again, which cost ~50 ms a figure
    # (most of a page's drawing); the figure gets its own copy all the same.
    validate, fig.layout._validate = fig.layout._validate, False
    try:
        fig.layout.template = _TEMPLATE
    finally:
        fig.layout._validate = validate
    return fig


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _span(curves: Sequence[SettingCurve], b_ref: float) -> tuple[float, float]:
    batch = [p.batch_size for c in curves for p in c.points] + [b_ref]
    batch += [c.b_star for c in curves if c.b_star]
    return min(batch) / 1.25, max(batch) * 1.25


# --------------------------------------------------------------------------- steps-to-target
def steps_to_target_figure(curves: Sequence[SettingCurve], *, b_ref: float, overhead: float,
                           normalized: bool = False, height: int = 560) -> go.Figure:
    """Steps-to-target ``S(B)`` against batch size on log₂ axes, one colour per setting.

    Per setting: the measured points (open triangles where every trial was censored, i.e. a lower
    bound), the fitted ``a + b/B``, the linear-scaling line ``S(B_ref)·B_ref/B`` from ``B_ref``
    with its ``(1 + r)`` band, and ``B*`` (a star on the fitted curve) with its interval.
    ``normalized`` divides each setting by its fitted ``S(B_ref)``, which puts every setting's
    linear-scaling line on the same ``B_ref/B`` (the paper's Figure 1 view); settings without a
    fit are left out of that view.
    """
    fig = go.Figure()
    b_lo, b_hi = _span(curves, b_ref) if curves else (b_ref / 4, b_ref * 4)
    grid = np.geomspace(b_lo, b_hi, 96)  # (96,) batch sizes for the drawn lines
    y_values: list[float] = []
    if normalized:
        lin = b_ref / grid
        fig.add_trace(scatter(x=grid, y=lin, mode="lines", line=dict(color="rgba(0,0,0,0)"),
                                 hoverinfo="skip", showlegend=False))
        fig.add_trace(scatter(x=grid, y=(1 + overhead) * lin, mode="lines", fill="tonexty",
                                 fillcolor="rgba(120,128,140,0.14)", line=dict(color="rgba(0,0,0,0)"),
                                 name=f"(1 + r) band, r = {overhead:g}", hoverinfo="skip"))
        fig.add_trace(scatter(x=grid, y=lin, mode="lines", line=dict(color="#5A6270", dash="dot", width=1.5),
                                 name=f"linear scaling from B_ref = {b_ref:g}", hoverinfo="skip"))
    for i, curve in enumerate(curves):
        color = PALETTE[i % len(PALETTE)]
        scale = 1.0
        if normalized:
            if not curve.has_fit:
                continue
            scale = 1.0 / float(curve.fitted_steps(b_ref))
        group = f"setting-{i}"
        if curve.has_fit and not normalized:
            s_ref = float(curve.fitted_steps(b_ref))
            lin = s_ref * b_ref / grid  # (96,) S_lin(B)
            fig.add_trace(scatter(x=grid, y=lin, mode="lines", line=dict(color="rgba(0,0,0,0)"),
                                     legendgroup=group, hoverinfo="skip", showlegend=False))
            fig.add_trace(scatter(x=grid, y=(1 + overhead) * lin, mode="lines", fill="tonexty",
                                     fillcolor=_rgba(color, 0.10), line=dict(color="rgba(0,0,0,0)"),
                                     legendgroup=group, hoverinfo="skip", showlegend=False))
            fig.add_trace(scatter(x=grid, y=lin, mode="lines", line=dict(color=color, dash="dot", width=1.2),
                                     legendgroup=group, name=f"{curve.label}: linear from B_ref",
                                     hoverinfo="skip", showlegend=False))
        if curve.has_fit:
            fitted = curve.fitted_steps(grid) * scale
            fig.add_trace(scatter(
                x=grid, y=fitted, mode="lines", line=dict(color=color, width=2), legendgroup=group,
                name=f"{curve.label}: fit a + b/B", showlegend=False,
                hovertemplate=f"{curve.label}<br>fit: S(%{{x:.0f}}) = %{{y:.4g}}<extra></extra>"))
            measured = [p.batch_size for p in curve.points] or [b_ref]
            y_values += [float(curve.fitted_steps(b)) * scale for b in (min(measured), max(measured))]
        reached = [p for p in curve.points if not p.censored]
        censored = [p for p in curve.points if p.censored]
        for points, symbol, suffix in ((reached, "circle", ""), (censored, "triangle-up-open", " (censored)")):
            if not points:
                continue
            ys = [p.steps * scale for p in points]
            y_values += ys
            fig.add_trace(scatter(
                x=[p.batch_size for p in points], y=ys, mode="markers", legendgroup=group,
                name=curve.label + suffix, showlegend=not suffix or not reached,
                marker=dict(color=color, size=10, symbol=symbol, line=dict(color="white", width=1)),
                customdata=[p.run_id or "" for p in points],
                hovertext=[p.hover or f"B = {p.batch_size}" for p in points],
                hovertemplate="%{hovertext}<extra>" + curve.label + "</extra>"))
        if curve.has_fit and curve.b_star:
            y_star = float(curve.fitted_steps(curve.b_star)) * scale
            y_values.append(y_star)
            error_x = None
            interval = ""
            if curve.b_star_low is not None and curve.b_star_high is not None:
                error_x = dict(type="data", symmetric=False, array=[curve.b_star_high - curve.b_star],
                               arrayminus=[curve.b_star - curve.b_star_low], color=color, thickness=2, width=6)
                interval = f" [{curve.b_star_low:.0f}, {curve.b_star_high:.0f}]"
            fig.add_trace(scatter(
                x=[curve.b_star], y=[y_star], mode="markers", legendgroup=group, showlegend=False,
                name=f"{curve.label}: B*", error_x=error_x,
                marker=dict(symbol="star", size=17, color=color, line=dict(color="#1F2329", width=1)),
                hovertemplate=f"<b>B* = {curve.b_star:.0f}</b>{interval} sequences<extra>{curve.label}</extra>"))
    fig.add_vline(x=b_ref, line=dict(color="#9AA1AC", width=1, dash="dash"),
                  annotation_text=f"B_ref = {b_ref:g}", annotation_position="top right",
                  annotation_font=dict(size=11, color="#5A6270"))
    if normalized:
        y_values.append(1.0)  # S(B_ref)/S(B_ref)
    y_title = "S(B) / S(B_ref) (log₂)" if normalized else "steps to target S(B) (log₂)"
    return _style(fig, title=None, height=height,
                  xaxis=_axis(title_text="batch size B (sequences, log₂)", **_log2_axis([b_lo, b_hi], max_ticks=12)),
                  yaxis=_axis(title_text=y_title, **_log2_axis(y_values or [1.0, 2.0], pad=1.5)))


# --------------------------------------------------------------------------- scaling laws
def scaling_law_figure(points: Sequence[ScalingPoint], *, fit: PowerLaw | None = None,
                       fits: Sequence[PowerLaw] = (), references: Sequence[PowerLaw] = (), x_title: str,
                       x_range: tuple[float, float] | None = None, height: int = 500) -> go.Figure:
    """``B*`` against N or D on log-log axes: each setting's B* with its interval, the power laws
    fitted to them (solid; ``fit`` and one per group of settings in ``fits``, DESIGN.md §1: a law
    only across settings that share the other variable) and published laws (dashed)."""
    fig = go.Figure()
    xs = [p.x for p in points]
    if x_range is None:
        x_range = (min(xs) / 1.6, max(xs) * 1.6) if xs else (1.0, 1000.0)
    grid = np.geomspace(x_range[0], x_range[1], 64)  # (64,) x for the drawn laws
    y_values = [p.b_star for p in points] + [p.low for p in points if p.low] + [p.high for p in points if p.high]
    for j, law in enumerate(references):
        ys = law(grid)
        y_values += [float(ys.min()), float(ys.max())]
        fig.add_trace(scatter(x=grid, y=ys, mode="lines", name=law.label,
                                 line=dict(color=("#7F8793", "#B07AA1", "#9C755F")[j % 3], dash="dash", width=1.6),
                                 hovertemplate=f"{law.label}<br>x = %{{x:.4g}}: B* = %{{y:.0f}}<extra></extra>"))
    for k, law in enumerate([fit] * (fit is not None) + list(fits)):
        ys = law(grid)
        y_values += [float(ys.min()), float(ys.max())]
        color = PALETTE[(0, 2, 4, 5, 6, 1)[k % 6]]  # PALETTE[3] marks the settings' points
        fig.add_trace(scatter(x=grid, y=ys, mode="lines", name=law.label, line=dict(color=color, width=2.4),
                                 hovertemplate=f"{law.label}<br>x = %{{x:.4g}}: B* = %{{y:.0f}}<extra></extra>"))
    if points:
        has_ci = all(p.low is not None and p.high is not None for p in points)
        error_y = dict(type="data", symmetric=False, array=[p.high - p.b_star for p in points],
                       arrayminus=[p.b_star - p.low for p in points], color=PALETTE[0], thickness=1.5,
                       width=5) if has_ci else None
        fig.add_trace(scatter(
            x=xs, y=[p.b_star for p in points], mode="markers", name="B* of each setting", error_y=error_y,
            marker=dict(color=PALETTE[3], size=11, symbol="diamond", line=dict(color="white", width=1)),
            hovertext=[p.label for p in points],
            hovertemplate="%{hovertext}<br>x = %{x:.4g}<br>B* = %{y:.0f}<extra></extra>"))
    return _style(fig, title=None, height=height, xaxis=_axis(title_text=x_title, **_log10_axis(*x_range)),
                  yaxis=_axis(title_text="critical batch size B* (sequences, log₂)",
                              **_log2_axis(y_values or [64, 1024], pad=1.4)))


# --------------------------------------------------------------------------- live trials
def loss_curve_figure(curves: Sequence[LossCurve], *, target_loss: float | None = None,
                      height: int = 340) -> go.Figure:
    """Held-out loss of the averaged weights against training tokens, with the target line."""
    fig = go.Figure()
    # one add_traces for all: adding hundreds one by one copies the figure's data each time
    fig.add_traces([scatter(x=list(curve.tokens), y=list(curve.losses), mode="lines+markers", name=curve.label,
                               line=dict(color=PALETTE[i % len(PALETTE)], width=2), marker=dict(size=5),
                               hovertemplate="%{x:.4s} tokens<br>loss %{y:.4f}<extra>" + curve.label + "</extra>")
                    for i, curve in enumerate(curves)])
    if target_loss is not None and math.isfinite(target_loss):
        fig.add_hline(y=target_loss, line=dict(color="#D55E00", dash="dash", width=1.5),
                      annotation_text=f"target {target_loss:.4f}", annotation_position="top right",
                      annotation_font=dict(size=11, color="#D55E00"))
    return _style(fig, title=None, height=height,
                  xaxis=_axis(title_text="training tokens", gridcolor=_GRID, showline=True, linecolor="#B8BEC7",
                              tickformat=".2s"),
                  yaxis=_axis(title_text="held-out loss (EWA weights)", gridcolor=_GRID, showline=True,
                              linecolor="#B8BEC7"))


def cell_grid_figure(settings: Sequence[str], batch_sizes: Sequence[int], states: dict[tuple[str, int], str],
                     hover: dict[tuple[str, int], str] | None = None, height: int | None = None) -> go.Figure:
    """The cells of a study, settings (rows) × batch sizes (columns), coloured by state.

    ``states`` maps ``(setting, batch size)`` to a key of :data:`STATE_COLORS`; missing cells
    are ``planned``.
    """
    names = list(STATE_COLORS)
    n = len(names)
    # A discrete colour scale: state k owns the band [k/n, (k+1)/n] of the scale.
    scale = []
    for k, name in enumerate(names):
        scale += [[k / n, STATE_COLORS[name]], [(k + 1) / n, STATE_COLORS[name]]]
    z, text, tips = [], [], []
    for setting in settings:
        row_z, row_text, row_tip = [], [], []
        for b in batch_sizes:
            state = states.get((setting, b), "planned")
            row_z.append(names.index(state) + 0.5)
            row_text.append(state)
            row_tip.append((hover or {}).get((setting, b), f"{setting} · B = {b}: {state}"))
        z.append(row_z)
        text.append(row_text)
        tips.append(row_tip)
    fig = go.Figure(dict(type="heatmap",
        z=z, x=[str(b) for b in batch_sizes], y=list(settings), zmin=0, zmax=n, colorscale=scale, showscale=False,
        text=text, texttemplate="%{text}", textfont=dict(size=12), xgap=3, ygap=3,
        customdata=tips, hovertemplate="%{customdata}<extra></extra>"))
    return _style(fig, title=None, height=height or 90 + 46 * max(1, len(settings)),
                  xaxis=_axis(title_text="batch size B (sequences)", type="category", side="top", showgrid=False),
                  yaxis=_axis(autorange="reversed", type="category", showgrid=False))

"""Several studies side by side: their B* and laws in one table, their points and fitted
laws on one chart, a colour per study. Pure: analyses in, rows and figures out (no Streamlit).

Each study is fitted at its own ``B_ref`` and r (the rule it was launched with), so what is
compared is each study's own answer; a study re-run, a recipe against another, a CPU study against
its GPU twin.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from app import charts, fit_view
from app.charts import PALETTE

#: Most studies one comparison draws (a colour each; more become unreadable).
MAX_STUDIES = 6


def parse_compare(value: str | None, names: Sequence[str], current: str) -> list[str]:
    """The studies named in the URL's ``compare`` query parameter (comma separated) that exist,
    without ``current`` and repeats, at most :data:`MAX_STUDIES` − 1."""
    wanted = [v.strip() for v in (value or "").split(",") if v.strip()]
    out = []
    for name in wanted:
        if name in names and name != current and name not in out:
            out.append(name)
    return out[:MAX_STUDIES - 1]


def setting_rows(tables: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per (study, setting): N, D, B* with its 95% interval, B_noise."""
    rows = []
    for study, table in tables.items():
        for s in table.settings:
            low, high = (s.cbs_ci if s.cbs_ci is not None else (None, None))
            rows.append({"study": study, "setting": s.setting,
                         "N (M)": s.n_params / fit_view.N_UNIT if s.n_params else None, "D (tokens)": s.tokens,
                         "B*": _finite(s.cbs), "B* low": _finite(low), "B* high": _finite(high),
                         "B_noise": _finite(getattr(s, "b_noise", None))})
    return rows


def law_rows(tables: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every fitted law of every study (:func:`app.fit_view.law_rows`), with a ``study`` column first."""
    return [{"study": study, **row} for study, table in tables.items() for row in fit_view.law_rows(table)]


def comparison_figure(tables: Mapping[str, Any], variable: str, *, x_title: str, height: int = 460) -> go.Figure:
    """B* against N (``variable='n'``, millions) or D (``'d'``, tokens) of every study, each in its
    colour: the settings' B* with their intervals and the study's fitted laws in that variable."""
    fig = go.Figure()
    xs, ys = [], []
    per_study = {study: (fit_view.scaling_points(t, variable), fit_view.fitted_laws(t, variable))
                 for study, t in tables.items()}
    for points, _ in per_study.values():
        xs += [p.x for p in points]
        ys += [p.b_star for p in points] + [v for p in points for v in (p.low, p.high) if v]
    x_range = (min(xs) / 1.6, max(xs) * 1.6) if xs else (1.0, 1000.0)
    grid = np.geomspace(x_range[0], x_range[1], 64)  # (64,) x of the drawn laws
    for i, (study, (points, laws)) in enumerate(per_study.items()):
        color = PALETTE[i % len(PALETTE)]
        for law in laws:
            line = law(grid)
            ys += [float(line.min()), float(line.max())]
            fig.add_trace(go.Scatter(x=grid, y=line, mode="lines", name=f"{study}: {law.label}", legendgroup=study,
                                     line=dict(color=color, width=2),
                                     hovertemplate=f"{study}: {law.label}<br>x = %{{x:.4g}}: B* = %{{y:.1f}}<extra></extra>"))
        if points:
            has_ci = all(p.low is not None and p.high is not None for p in points)
            error_y = dict(type="data", symmetric=False, array=[p.high - p.b_star for p in points],
                           arrayminus=[p.b_star - p.low for p in points], color=color, thickness=1.4,
                           width=4) if has_ci else None
            fig.add_trace(go.Scatter(x=[p.x for p in points], y=[p.b_star for p in points], mode="markers",
                                     name=f"{study}: B* of each setting", legendgroup=study, error_y=error_y,
                                     marker=dict(color=color, size=10, symbol=("diamond", "circle", "square",
                                                                               "triangle-up", "x", "star")[i % 6]),
                                     hovertext=[f"{study}: {p.label}" for p in points],
                                     hovertemplate="%{hovertext}<br>x = %{x:.4g}<br>B* = %{y:.1f}<extra></extra>"))
    fig.update_xaxes(title_text=x_title, **charts._log10_axis(*x_range))
    fig.update_yaxes(title_text="critical batch size B* (sequences, log₂)", **charts._log2_axis(ys or [4, 64], pad=1.4))
    return charts._style(fig, title=None, height=height)


def labelled_curves(curves_by_study: Mapping[str, Sequence[charts.SettingCurve]]) -> list[charts.SettingCurve]:
    """Every study's setting curves in one list, each labelled ``study: setting`` (one colour each
    in :func:`app.charts.steps_to_target_figure`)."""
    import dataclasses

    return [dataclasses.replace(c, label=f"{study}: {c.label}") for study, curves in curves_by_study.items()
            for c in curves]


def _finite(value) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None

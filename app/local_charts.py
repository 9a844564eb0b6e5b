"""Plotly figures and tables of a local-CBS study (Merrill et al. 2025): data in, figure out.

Input is the readout of a ``kind: local`` study (a :class:`cbscore.local.LocalStudyReadout`, from
:func:`workers.query.api.study_local_fit`; its ``to_json_dict()`` is ``cbs study fit NAME --json``): per checkpoint the local CBS ``k*·B0`` by Merrill's rule
and by the noise-aware rule, with the bracket ``[k*·B0, k_next·B0)`` it lies in; the power law
``B*(t) = a·t^b`` over tokens for each rule; the batch-size warm-up read off it; and, once launched,
the warm-up run against its small- and large-batch controls (:func:`arms_rows`). Pure functions,
unit-tested without Streamlit or MLflow, like :mod:`app.charts`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go

from app.charts import PALETTE, _log2_axis, _style
from app.kinds import has_local_cbs

if TYPE_CHECKING:
    from cbscore.local import LocalCheckpoint, LocalStudyReadout

_GRID = "#E6E9EF"
#: Each rule as the page names it, and its colour.
RULE_LABELS = {"merrill": "Merrill (smoothed training loss, one ε)",
               "noise_aware": "noise-aware (held-out EWA loss, ε from the noise)"}
_COLORS = {"merrill": PALETTE[0], "noise_aware": PALETTE[3]}


def comparable_settings(local_spec, others: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(study, setting id)`` of the settings of other (global) studies whose global CBS may be set
    beside a local study's: the same model, context length and data (its source and vocabulary;
    where the store lives does not matter). ``others``: study name → its ``StudySpec``."""
    def data_key(spec) -> tuple:
        data = dict(spec.data)
        return (data.get("source", "builtin"), data.get("vocab_size"), data.get("max_documents"))

    model = local_spec.models[0]
    out = []
    for name, other in sorted(others.items()):
        if has_local_cbs(other.kind) or other.context_tokens != local_spec.context_tokens \
                or data_key(other) != data_key(local_spec):
            continue
        out += [(name, s.setting_id) for s in other.resolve_settings() if s.model == model]
    return out


def global_points(fits: Mapping[str, Any], wanted: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The global B* of each wanted ``(study, setting)`` from its fit (``fits``: study →
    :class:`cbscore.analysis.TableAnalysis`), where the fit gave one."""
    out = []
    for study, setting in wanted:
        table = fits.get(study)
        for s in table.settings if table is not None else ():
            if s.setting == setting and s.cbs is not None and math.isfinite(s.cbs) and s.cbs > 0:
                out.append({"study": study, "setting": setting, "tokens": float(s.tokens), "cbs": float(s.cbs)})
    return out


def local_cbs_figure(fit: LocalStudyReadout, *, global_cbs=(), height: int = 420) -> go.Figure:
    """Local CBS (sequences) against the checkpoints' tokens, log–log: each rule's readouts with
    their brackets (a triangle where ``k*`` is the top of the grid: a lower bound), its power-law
    fit, the base run's noise scale ``B_simple`` where its probe ran (McCandlish et al. 2018), the
    global CBS of other studies of the same model and data at their D (:func:`global_points`: a
    star each), and the warm-up's batch by Merrill's curve as a step line."""
    fig = go.Figure()
    values: list[float] = [float(fit.base_batch_size)]
    tokens_all = [float(c.tokens) for c in fit.checkpoints]
    for rule, label in RULE_LABELS.items():
        pts = [(float(c.tokens), c.rule(rule)) for c in fit.checkpoints if c.rule(rule) is not None]
        if not pts:
            continue
        x = [t for t, _ in pts]
        y = [r.local_cbs for _, r in pts]
        upper = [(r.bracket[1] - r.local_cbs) if r.bracket[1] is not None else 0.0 for _, r in pts]
        values += y + [r.bracket[1] for _, r in pts if r.bracket[1] is not None]
        symbols = ["triangle-up" if r.lower_bound else "circle" for _, r in pts]
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="markers", name=label, marker=dict(size=10, color=_COLORS[rule], symbol=symbols),
            error_y=dict(type="data", symmetric=False, array=upper, arrayminus=[0.0] * len(y), thickness=1.2,
                         color=_COLORS[rule]),
            customdata=[[r.k_star, "yes" if r.tolerance_decides else "no"] for _, r in pts],
            hovertemplate="t = %{x:.4s} tokens<br>local CBS %{y:g} (k* = %{customdata[0]:g})<br>"
                          "ε decides: %{customdata[1]}<extra>" + rule + "</extra>"))
        curve = fit.curve.get(rule)
        if curve is not None and tokens_all:
            grid = np.geomspace(min(tokens_all) / 1.2, max(tokens_all) * 1.2, 50)
            line = curve.coef * grid ** curve.exponent
            values += [float(line.min()), float(line.max())]
            fig.add_trace(go.Scatter(
                x=grid.tolist(), y=line.tolist(), mode="lines", showlegend=True,
                name=f"{rule} fit: B* = {curve.coef:.3g}·t^{curve.exponent:.3g}",
                line=dict(color=_COLORS[rule], width=1.5, dash="dash"), hoverinfo="skip"))
    for i, noise in enumerate(fit.base_b_simple):  # the base run's probe, where it ran
        values += noise.b_simple
        fig.add_trace(go.Scatter(x=list(noise.tokens), y=list(noise.b_simple), mode="lines",
                                 name=f"base run's B_simple (seed {noise.seed})",
                                 line=dict(color=PALETTE[(2 + i) % len(PALETTE)], width=1, dash="dot"),
                                 hovertemplate="%{x:.4s} tokens<br>B_simple %{y:.3g}<extra></extra>"))
    for i, g in enumerate(global_cbs):
        values.append(g["cbs"])
        tokens_all.append(g["tokens"])
        fig.add_trace(go.Scatter(x=[g["tokens"]], y=[g["cbs"]], mode="markers",
                                 name=f"global B* of {g['study']} ({g['setting']})",
                                 marker=dict(symbol="star", size=13, color=PALETTE[(4 + i) % len(PALETTE)]),
                                 hovertemplate="D = %{x:.4s} tokens<br>global B* %{y:.3g}<extra></extra>"))
    warm = fit.warmup.get("merrill")
    if warm is not None and tokens_all:
        xs, ys = [1.0], [float(fit.base_batch_size)]
        for tokens_from, batch, _ in warm.plan.batch_schedule:
            xs += [float(tokens_from), float(tokens_from)]
            ys += [ys[-1], float(batch)]
        xs.append(float(fit.total_tokens))
        ys.append(ys[-1])
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="warm-up batch (Merrill's curve)",
                                 line=dict(color="#5A6270", width=1.5, shape="hv"), hoverinfo="skip"))
    fig.update_xaxes(type="log", title_text="training tokens t (the checkpoint)", gridcolor=_GRID, showline=True,
                     linecolor="#B8BEC7", tickformat=".2s",
                     range=[math.log10(min(tokens_all) / 1.5), math.log10(max(tokens_all + [fit.total_tokens]) * 1.2)]
                     if tokens_all else None)
    fig.update_yaxes(title_text="local CBS k*·B0 (sequences)", **_log2_axis(values, pad=1.5))
    return _style(fig, title=None, height=height)


def branch_loss_figure(checkpoint: LocalCheckpoint, *, epsilon: float, height: int = 300) -> go.Figure:
    """One checkpoint's branches: Merrill's smoothed training loss and the held-out EWA loss at
    the window's end against ``k`` (means over seeds), with the ``ε`` band over the smallest ``k``."""
    fig = go.Figure()
    ks = list(checkpoint.multipliers)
    for rows, label, color in ((checkpoint.train_loss_nats, "smoothed training loss after Δ", _COLORS["merrill"]),
                               (checkpoint.eval_loss_nats, "held-out EWA loss at Δ", _COLORS["noise_aware"])):
        means = [float(np.mean(row)) for row in rows]
        fig.add_trace(go.Scatter(x=ks, y=means, mode="lines+markers", name=label, line=dict(color=color, width=2),
                                 hovertemplate="k = %{x:g}<br>%{y:.4f} nats<extra>" + label + "</extra>"))
    if ks:
        first = float(np.mean(checkpoint.train_loss_nats[0]))
        fig.add_hrect(y0=first, y1=first + epsilon, line_width=0, fillcolor=_COLORS["merrill"], opacity=0.12,
                      annotation_text=f"ε = {epsilon:g}", annotation_position="top left")
    fig.update_xaxes(type="log", title_text="multiplier k (batch k·B0, learning rate f(k)·η0)", gridcolor=_GRID,
                     tickvals=ks, ticktext=[f"{k:g}" for k in ks])
    fig.update_yaxes(title_text="loss (nats per token)", gridcolor=_GRID)
    return _style(fig, title=f"t = {checkpoint.tokens:,} tokens, Δ = {checkpoint.window_tokens:,}", height=height)


def readout_rows(fit: LocalStudyReadout) -> list[dict[str, Any]]:
    """One row per checkpoint: both rules' local CBS, bracket and whether ε decides the answer,
    whether the noise decided the noise-aware rule, and that rule on the raw weights."""
    rows = []
    for c in fit.checkpoints:
        row: dict[str, Any] = {"t (tokens)": c.tokens, "Δ (tokens)": c.window_tokens,
                               "k read": ", ".join(f"{k:g}" for k in c.multipliers)}
        for rule in RULE_LABELS:
            r = c.rule(rule)
            name = "Merrill" if rule == "merrill" else "noise-aware"
            row[f"{name} B*"] = None if r is None else r.local_cbs
            row[f"{name} bracket"] = None if r is None else (
                f"[{r.bracket[0]:g}, {r.bracket[1]:g})" if r.bracket[1] is not None else f"≥ {r.bracket[0]:g}")
            row[f"{name}: ε decides"] = None if r is None else bool(r.tolerance_decides)
        # whether the noise, not the floor ε, decided; the same rule on the raw weights
        row["noise-aware: noise decided"] = None if c.noise_aware is None else bool(c.noise_aware.noise_decides)
        row["noise-aware (raw weights) B*"] = None if c.noise_aware_raw is None else c.noise_aware_raw.local_cbs
        row["notes"] = "; ".join(c.notes)
        rows.append(row)
    return rows


def warmup_summary(fit: LocalStudyReadout, rule: str = "merrill") -> str | None:
    """The warm-up in one sentence (``None`` where the curve could not be fitted)."""
    warm = fit.warmup.get(rule)
    if warm is None:
        return None
    plan = warm.plan
    switches = ", ".join(f"{b} at {t:,} tokens (lr ×{m:.3g})" for t, b, m in plan.batch_schedule) or "none"
    return (f"Start at B0 = {fit.base_batch_size}; switch to {switches}. {plan.steps:,} steps against "
            f"{plan.constant_steps:,} at B0 throughout ({100 * plan.fraction_saved:.1f}% fewer; "
            f"{plan.large_batch_steps:,} at the final batch throughout).")


def arms_rows(fit: LocalStudyReadout) -> list[dict[str, Any]]:
    """One row per arm of the warm-up comparison (the fit's ``arms``; Merrill et al. 2025, Table 1):
    its batch and rate, the final held-out loss over the seeds that finished (mean and interval:
    ``mean ± t·SE`` with three seeds or more, the range with two), steps taken and tokens."""
    if fit.arms is None:
        return []
    rows = []
    for a in fit.arms.arms:
        loss = a.final_eval_loss
        interval = loss.interval
        rows.append({
            "arm": a.label,
            "batch (sequences)": f"{a.batch_size} → {a.final_batch_size}" if a.batch_schedule else str(a.batch_size),
            "lr": f"{a.lr:.3g} → {a.final_lr:.3g}" if a.batch_schedule else f"{a.lr:.3g}",
            "final held-out loss": loss.mean,
            "interval": None if interval is None else f"[{interval[0]:.4f}, {interval[1]:.4f}] ({loss.interval_kind})",
            "steps": ", ".join(f"{s:,}" for s in a.steps) if a.steps else f"({a.planned_steps:,} planned)",
            "tokens": ", ".join(f"{t:,}" for t in a.tokens) if a.tokens else f"({a.planned_tokens:,} planned)",
            "seeds finished": f"{a.finished} of {len(a.seeds)}",
        })
    return rows

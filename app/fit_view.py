"""From a steps table and its analysis to what the results pages draw and list.

Pure functions (no Streamlit): a :class:`cbscore.analysis.TableAnalysis` plus the raw rows it
came from (which may carry the best trial's ``lr``, ``beta2``, ``tau`` and ``run_id``) become
the chart inputs of :mod:`app.charts` and the rows of the results table. The study pages and the
Import page share them, so a published steps table is drawn exactly like a study run here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.charts import PowerLaw, ScalingPoint, SettingCurve, StepsPoint

#: N on the scaling charts is in millions of non-embedding parameters (the paper's unit).
N_UNIT = 1e6
#: The paper's published laws, N in millions, B* in sequences (Zhang et al. 2025, §4, Figure 1).
PAPER_LAWS_N = (
    PowerLaw(label="paper, Chinchilla (D ∝ N): B* = 93.20·N^0.47", coef=93.20, exponent=0.47),
    PowerLaw(label="paper, fixed D: B* = 621.3·N^0.087", coef=621.3, exponent=0.087),
)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _reached(row: Mapping) -> bool:
    outcome = str(row.get("outcome") or "reached").strip().lower()
    return outcome == "reached" and (_number(row.get("steps")) or 0) > 0


def best_trials(rows: Iterable[Mapping]) -> dict[tuple[str, int], Mapping]:
    """The reached row with the fewest steps for each ``(setting, batch size)``: its ``S(B)``."""
    best: dict[tuple[str, int], Mapping] = {}
    for row in rows:
        if not _reached(row):
            continue
        key = (str(row["setting"]).strip(), int(float(row["batch_size"])))
        if key not in best or float(row["steps"]) < float(best[key]["steps"]):
            best[key] = row
    return best


def censored_floors(rows: Iterable[Mapping]) -> dict[tuple[str, int], float]:
    """Largest step count reported by a censored trial per cell (a lower bound on its S)."""
    floor: dict[tuple[str, int], float] = {}
    for row in rows:
        if str(row.get("outcome") or "").strip().lower() != "censored":
            continue
        steps = _number(row.get("steps"))
        if steps and steps > 0:
            key = (str(row["setting"]).strip(), int(float(row["batch_size"])))
            floor[key] = max(floor.get(key, 0.0), steps)
    return floor


def _hyper(row: Mapping) -> str:
    parts = []
    for key, name, fmt in (("lr", "lr", "{:.3g}"), ("beta2", "β2", "{:g}"), ("tau", "τ", "{:g}")):
        value = _number(row.get(key))
        if value is not None:
            parts.append(f"{name} {fmt.format(value)}")
    return ", ".join(parts)


def setting_curves(table, rows: Sequence[Mapping]) -> list[SettingCurve]:
    """One :class:`SettingCurve` per setting of ``table`` (a ``TableAnalysis`` of ``rows``)."""
    best = best_trials(rows)
    floors = censored_floors(rows)
    curves = []
    for s in table.settings:
        points = []
        for p in s.points:
            key = (s.setting, p.batch_size)
            if p.steps is not None:
                row = best.get(key, {})
                run_id = str(row.get("run_id") or "")
                hyper = _hyper(row)
                hover = (f"<b>B = {p.batch_size}</b>: S = {p.steps:,.0f} steps<br>"
                         f"best of {p.n_reached} reached / {p.n_trials} trials"
                         + (f"<br>{hyper}" if hyper else "")
                         + (f"<br>run {run_id[:12]} (click to open)" if run_id else ""))
                points.append(StepsPoint(batch_size=p.batch_size, steps=p.steps, hover=hover, run_id=run_id or None))
            elif key in floors:
                points.append(StepsPoint(
                    batch_size=p.batch_size, steps=floors[key], censored=True,
                    hover=(f"<b>B = {p.batch_size}</b>: no trial reached the target<br>S > {floors[key]:,.0f} "
                           f"steps ({p.n_censored} censored, {p.n_diverged} diverged)")))
        low = high = None
        if s.cbs_ci is not None and all(math.isfinite(v) for v in s.cbs_ci):
            low, high = s.cbs_ci
        curves.append(SettingCurve(
            label=s.setting, points=tuple(points),
            fit_a=None if s.fit is None else s.fit.a, fit_b=None if s.fit is None else s.fit.b,
            b_star=s.cbs, b_star_low=low, b_star_high=high))
    return curves


def results_rows(table) -> list[dict[str, Any]]:
    """The per-setting results table: the fit, ``B*`` (fitted, interval, empirical) and notes."""
    out = []
    for s in table.settings:
        ci = s.cbs_ci if s.cbs_ci is not None else (None, None)
        notes = [e.split(": ", 1)[-1] for e in s.errors]
        out.append({
            "setting": s.setting,
            "N": s.n_params,
            "D (tokens)": s.tokens,
            "batch sizes": ", ".join(str(b) for b in s.batch_sizes),
            "S_min (steps)": s.s_min,
            "B_noise (seq)": s.b_noise,
            "B* (seq)": s.cbs,
            "95% low": ci[0],
            "95% high": ci[1],
            "B* from points": s.cbs_empirical,
            "R² (log S)": s.r2,
            "notes": "; ".join(notes),
        })
    return out


def scaling_points(table, variable: str) -> list[ScalingPoint]:
    """Each fitted setting's ``B*`` at its N (millions, ``variable='n'``) or D (tokens, ``'d'``)."""
    points = []
    for s in table.settings:
        x = s.n_params / N_UNIT if variable == "n" and s.n_params else (s.tokens if variable == "d" else None)
        if x is None or s.cbs is None or not math.isfinite(s.cbs):
            continue
        low = high = None
        if s.cbs_ci is not None and all(math.isfinite(v) for v in s.cbs_ci):
            low, high = s.cbs_ci
        points.append(ScalingPoint(x=float(x), b_star=float(s.cbs), low=low, high=high, label=s.setting))
    return points


def fitted_law(law, variable: str) -> PowerLaw | None:
    """A fitted :class:`cbscore.analysis.PowerLawFit` as a chart line in the axis units.

    The analysis fits ``B* = c·x^α`` with x in parameters or tokens; on the N chart x is in
    millions, so the coefficient becomes ``c·(10⁶)^α``.
    """
    if law is None:
        return None
    scale = N_UNIT if variable == "n" else 1.0
    coef = law.coef * scale**law.exponent
    name, symbol = ("N", "α") if variable == "n" else ("D", "β")
    label = f"this data: B* = {coef:.4g}·{name}^{law.exponent:.3f}"
    low = high = None
    if law.exponent_ci is not None and all(math.isfinite(v) for v in law.exponent_ci):
        low, high = law.exponent_ci
        label += f" ({symbol} ∈ [{low:.3f}, {high:.3f}])"
    return PowerLaw(label=label, coef=coef, exponent=law.exponent, exponent_low=low, exponent_high=high)


def law_rows(table) -> list[dict[str, Any]]:
    """The fitted laws as table rows: c, the exponents of N (α) and D (β) with their 95%
    intervals, R² and the number of settings. N is in millions, D in tokens."""
    rows = []
    for variable, law in (("n", table.scaling.n), ("d", table.scaling.d)):
        if law is None:
            continue
        exponent, interval = law.exponent, _interval(law.exponent_ci)
        rows.append({
            "law": "B* = c·N^α (N in millions)" if variable == "n" else "B* = c·D^β (D in tokens)",
            "c": fitted_law(law, variable).coef,
            "α (N exponent)": exponent if variable == "n" else None,
            "α interval": interval if variable == "n" else None,
            "β (D exponent)": exponent if variable == "d" else None,
            "β interval": interval if variable == "d" else None,
            "R²": law.r2,
            "settings": len(law.settings),
        })
    joint = table.scaling.joint
    if joint is not None:
        rows.append({
            "law": "B* = c·N^α·D^β (N in millions, D in tokens)",
            "c": joint.coef * N_UNIT**joint.exponent_n,
            "α (N exponent)": joint.exponent_n,
            "α interval": _interval(joint.exponent_n_ci),
            "β (D exponent)": joint.exponent_d,
            "β interval": _interval(joint.exponent_d_ci),
            "R²": joint.r2,
            "settings": len(joint.settings),
        })
    return rows


def _interval(ci) -> str:
    if ci is None or not all(math.isfinite(v) for v in ci):
        return "—"
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def batch_sizes(rows: Iterable[Mapping]) -> list[int]:
    """Distinct batch sizes of a steps table, ascending."""
    return sorted({int(float(r["batch_size"])) for r in rows})


def default_b_ref(sizes: Sequence[int], preferred: int | None = None) -> int:
    """``preferred`` (the study's B_ref) when measured, else the paper's 256, else the median size."""
    for candidate in (preferred, 256):
        if candidate in sizes:
            return int(candidate)
    return int(sizes[len(sizes) // 2]) if sizes else 256

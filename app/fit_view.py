"""From a steps table and its analysis to what the results pages draw and list.

Pure functions (no Streamlit): a :class:`cbscore.analysis.TableAnalysis` plus the typed rows it
came from (:class:`cbscore.analysis.StepsRow`, which may carry the best trial's ``lr``, ``beta2``,
``tau`` and ``run_id``) become the chart inputs of :mod:`app.charts` and the rows of the results table. The study pages and the
Import page share them, so a published steps table is drawn exactly like a study run here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.charts import PowerLaw, ScalingPoint, SettingCurve, StepsPoint
from cbscore.analysis import PAPER_EXPONENT_CHINCHILLA, PAPER_EXPONENT_D, PAPER_EXPONENT_N, StepsRow, edge_phrase

#: N on the scaling charts is in millions of non-embedding parameters (the paper's unit).
N_UNIT = 1e6
#: The paper's published laws, N in millions, B* in sequences (Zhang et al. 2025, §4, Figure 1).
PAPER_LAWS_N = (
    PowerLaw(label="paper, Chinchilla (D ∝ N): B* = 93.20·N^0.47", coef=93.20, exponent=0.47),
    PowerLaw(label="paper, fixed D: B* = 621.3·N^0.087", coef=621.3, exponent=0.087),
)




def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _reached(row: StepsRow) -> bool:
    return row.outcome == "reached" and (_finite(row.steps) or 0) > 0


def best_trials(rows: Iterable[StepsRow]) -> dict[tuple[str, int], StepsRow]:
    """The reached row with the fewest steps for each ``(setting, batch size)``: the trial its point links to."""
    best: dict[tuple[str, int], StepsRow] = {}
    for row in rows:
        if not _reached(row):
            continue
        key = (row.setting, row.batch_size)
        if key not in best or row.steps < best[key].steps:
            best[key] = row
    return best


def censored_floors(rows: Iterable[StepsRow]) -> dict[tuple[str, int], float]:
    """Per cell, the smallest budget (steps) a censored trial ran without reaching the target: its
    ``budget_steps`` (the study export), else the ``steps`` the row gives. ``S(B)`` is a minimum
    over trials and each censored trial's ``S`` exceeds its own budget, so ``S(B)`` exceeds the
    smallest (a lower bound)."""
    floor: dict[tuple[str, int], float] = {}
    for row in rows:
        if row.outcome != "censored":
            continue
        steps = _finite(row.budget_steps) or _finite(row.steps)
        if steps and steps > 0:
            key = (row.setting, row.batch_size)
            floor[key] = min(floor.get(key, math.inf), steps)
    return floor


def _hyper(row: StepsRow) -> str:
    parts = []
    for value, name, fmt in ((row.lr, "lr", "{:.3g}"), (row.beta2, "β2", "{:g}"), (row.tau, "τ", "{:g}")):
        value = _finite(value)
        if value is not None:
            parts.append(f"{name} {fmt.format(value)}")
    return ", ".join(parts)


def setting_curves(table, rows: Sequence[StepsRow]) -> list[SettingCurve]:
    """One :class:`SettingCurve` per setting of ``table`` (a ``TableAnalysis`` of ``rows``)."""
    best = best_trials(rows)
    floors = censored_floors(rows)
    curves = []
    for s in table.settings:
        points = []
        for p in s.points:
            key = (s.setting, p.batch_size)
            if p.steps is not None:
                row = best.get(key)
                run_id = row.run_id if row is not None else ""
                hyper = _hyper(row) if row is not None else ""
                read = ("fit across learning rates" if p.estimator == "fit" else "best learning rate")
                how = (f"mean over {p.n_seeds} seeds of each seed's {read}" if p.seed_steps
                       else f"{read} of {p.n_reached} reached / {p.n_trials} trials")
                if p.estimator == "fit" and p.steps_min is not None:
                    how += f" (fewest: {p.steps_min:,.0f} steps)"
                hover = (f"<b>B = {p.batch_size}</b>: S = {p.steps:,.0f} steps<br>{how}"
                         + (f"<br>{hyper}" if hyper else "")
                         + (f"<br>run {run_id[:12]} (click to open)" if run_id else ""))
                points.append(StepsPoint(batch_size=p.batch_size, steps=p.steps, hover=hover, run_id=run_id or None))
                continue
            # Nothing reached: a lower bound where censored trials give one (DESIGN.md §1, never
            # silently dropped); the analysis reads the budgets, the raw rows are the fallback.
            floor = p.steps_lower_bound if p.steps_lower_bound is not None else floors.get(key)
            if floor is not None:
                points.append(StepsPoint(
                    batch_size=p.batch_size, steps=floor, censored=True,
                    hover=(f"<b>B = {p.batch_size}</b>: censored at ≥ {floor:,.0f} steps, a lower bound<br>"
                           f"no trial reached the target ({p.n_censored} censored, {p.n_diverged} diverged)")))
        low = high = None
        if s.cbs_ci is not None and all(math.isfinite(v) for v in s.cbs_ci):
            low, high = s.cbs_ci
        curves.append(SettingCurve(
            label=s.setting, points=tuple(points),
            fit_a=None if s.fit is None else s.fit.a, fit_b=None if s.fit is None else s.fit.b,
            b_star=s.cbs, b_star_low=low, b_star_high=high))
    return curves


def reasons_once(notes: Iterable[str]) -> list[str]:
    """Per-setting notes (``"setting 'a': why"``) as one line per reason naming its settings:
    ``["setting 'a': why", "setting 'b': why"]`` → ``["settings 'a', 'b': why"]``. Other notes are
    kept as they are, once; the order is that of each reason's first note."""
    settings: dict[str, list[str]] = {}
    for note in notes:
        m = re.fullmatch(r"setting ('[^']*'): (.+)", note, flags=re.S)
        reason, setting = (m.group(2), m.group(1)) if m else (note, None)
        settings.setdefault(reason, [])
        if setting is not None and setting not in settings[reason]:
            settings[reason].append(setting)
    return [f"setting{'s' if len(who) > 1 else ''} {', '.join(who)}: {reason}" if who else reason
            for reason, who in settings.items()]


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


def _law_where(law) -> str:
    """What a law's settings share, in words (``""`` for an ungrouped law)."""
    name, value = getattr(law, "fixed_name", None), getattr(law, "fixed_value", None)
    if name == "tokens":
        return "at fixed D" + ("" if value is None else f" = {value / 1e9:.4g}B tokens")
    if name == "n_params":
        return "at fixed N" + ("" if value is None else f" = {value / N_UNIT:.4g}M")
    if name == "tokens_per_param":
        return f"with D ∝ N ({value:.3g} tokens per parameter)"
    return ""


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
    where = _law_where(law)
    label = f"this data{', ' + where if where else ''}: B* = {coef:.4g}·{name}^{law.exponent:.3f}"
    low = high = None
    if law.exponent_ci is not None and all(math.isfinite(v) for v in law.exponent_ci):
        low, high = law.exponent_ci
        label += f" ({symbol} ∈ [{low:.3f}, {high:.3f}])"
    return PowerLaw(label=label, coef=coef, exponent=law.exponent, exponent_low=low, exponent_high=high)


def fitted_laws(table, variable: str) -> list[PowerLaw]:
    """Every fitted law in ``variable`` as chart lines: for ``"n"`` the Chinchilla laws
    (``D ∝ N``) and the laws at fixed D; for ``"d"`` the laws at fixed N (one per group)."""
    laws = table.scaling.chinchilla + table.scaling.n_laws if variable == "n" else table.scaling.d_laws
    return [fitted_law(law, variable) for law in laws]


def law_rows(table) -> list[dict[str, Any]]:
    """The fitted laws as table rows, one per group of settings that defines a law (DESIGN.md §1):
    the law and what its settings share, the exponents of N (α) and D (β) with their 95%
    intervals, ``c`` in the paper's units (N in millions, D in billions; Zhang et al. 2025, §4)
    and raw (N in parameters, D in tokens), R² and the settings. Chinchilla laws first."""
    rows = []
    scaling = table.scaling
    for law in (*scaling.chinchilla, *scaling.n_laws, *scaling.d_laws):
        is_n = law.variable == "n"
        form = "B* = c·N^α" if is_n else "B* = c·D^β"
        exponent, interval = law.exponent, _interval(law.exponent_ci)
        rows.append({
            "law": f"{form} {_law_where(law)}",
            "c": law.coef_paper_units,
            "c units": "N in millions" if is_n else "D in billions",
            "c (raw)": law.coef,
            "α (N exponent)": exponent if is_n else None,
            "α interval": interval if is_n else None,
            "β (D exponent)": exponent if not is_n else None,
            "β interval": interval if not is_n else None,
            "R²": law.r2,
            "settings": ", ".join(law.settings),
        })
    joint = scaling.joint
    if joint is not None:
        rows.append({
            "law": "B* = c·N^α·D^β (N and D vary independently)",
            "c": joint.coef_paper_units,
            "c units": "N in millions, D in billions",
            "c (raw)": joint.coef,
            "α (N exponent)": joint.exponent_n,
            "α interval": _interval(joint.exponent_n_ci),
            "β (D exponent)": joint.exponent_d,
            "β interval": _interval(joint.exponent_d_ci),
            "R²": joint.r2,
            "settings": ", ".join(joint.settings),
        })
    return rows


def paper_rows(table) -> list[dict[str, Any]]:
    """This study's exponents beside the paper's (Zhang et al. 2025, §4): D at fixed N, N at
    fixed D, and N with D ∝ N (Chinchilla, "N and D together")."""
    comparison = table.paper_comparison()
    rows = []
    for label, estimate, paper in (
        ("β: D at fixed N", comparison.exponent_d, PAPER_EXPONENT_D),
        ("α: N at fixed D", comparison.exponent_n, PAPER_EXPONENT_N),
        ("α: N and D together (D ∝ N, Chinchilla)", comparison.exponent_chinchilla, PAPER_EXPONENT_CHINCHILLA),
    ):
        rows.append({
            "exponent": label,
            "this study": None if estimate is None else estimate.value,
            "95% interval": "—" if estimate is None else _interval(estimate.ci),
            "paper": paper,
            "from": "no law of this kind fits these settings" if estimate is None else estimate.source,
        })
    return rows


def paper_verdict(table) -> tuple[str, str]:
    """``(verdict, sentence)``: whether this study supports "B* scales with D, not with N", by the
    rule of :func:`cbscore.analysis.scales_with_d_not_n`."""
    comparison = table.paper_comparison()
    return comparison.verdict, comparison.sentence


#: Within this share of ``(1 + r)·B_ref``, the fitted ``B*`` says more about ``B_ref`` than about
#: the data: ``B* = (1 + r)·B_ref + r·B_noise`` (DESIGN.md §1) with ``r·B_noise`` small.
B_REF_DOMINATED_SHARE = 0.1
#: The Curves page's caption for such a setting.
B_REF_DOMINATED_CAPTION = "B_ref is above B_noise here; B* mostly reflects B_ref"


def b_ref_dominates(cbs: float | None, b_ref: float, overhead: float,
                    share: float = B_REF_DOMINATED_SHARE) -> bool:
    """Whether ``B*`` lies within ``share`` (10%) of ``(1 + r)·B_ref``, its floor in the closed form
    ``B* = (1 + r)·B_ref + r·B_noise`` (DESIGN.md §1; Zhang et al. 2025, §2.2): then
    ``r·B_noise ≤ share·(1 + r)·B_ref`` and ``B*`` mostly restates the choice of ``B_ref``."""
    if cbs is None or not math.isfinite(cbs):
        return False
    floor = (1.0 + overhead) * b_ref
    return abs(cbs - floor) <= share * floor


def b_ref_dominated_settings(table) -> list[str]:
    """Settings of ``table`` whose fitted ``B*`` mostly reflects ``B_ref`` (:func:`b_ref_dominates`)."""
    return [s.setting for s in table.settings if b_ref_dominates(s.cbs, table.b_ref, table.overhead)]


def _interval(ci) -> str:
    if ci is None or not all(math.isfinite(v) for v in ci):
        return "—"
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def batch_sizes(rows: Iterable[StepsRow]) -> list[int]:
    """Distinct batch sizes of a steps table, ascending."""
    return sorted({r.batch_size for r in rows})


def default_b_ref(sizes: Sequence[int], preferred: int | None = None) -> int:
    """``preferred`` (the study's B_ref) when measured, else the paper's 256, else the median size."""
    for candidate in (preferred, 256):
        if candidate in sizes:
            return int(candidate)
    return int(sizes[len(sizes) // 2]) if sizes else 256


def beyond_intervals(x: float | None, ci_x, y: float | None, ci_y) -> bool:
    """Whether ``x`` and ``y`` disagree beyond their intervals: either lies outside the other's.

    Not "the intervals do not overlap": the two estimates on one page share most of their data
    (the same points with one left out, or the same points read two ways), so their difference is
    far more certain than two independent intervals suggest. With neither interval, never."""
    if x is None or y is None or not (math.isfinite(x) and math.isfinite(y)):
        return False
    outside = lambda v, ci: ci is not None and not (ci[0] <= v <= ci[1])  # noqa: E731
    return outside(x, ci_y) or outside(y, ci_x)


def setting_flags(table) -> list[tuple[str, str]]:
    """``(setting, sentence)`` for what the Curves page must point out: a fitted ``B*``
    that moves beyond its interval when the reference point is left out (the target and
    ``S(B_ref)`` come from the reference cell), a fitted ``B*`` and an empirical one that differ by
    more than their intervals, and cells whose best learning rate sits at an edge of the grid."""
    flags = []
    for s in table.settings:
        if beyond_intervals(s.cbs, s.cbs_ci, getattr(s, "cbs_without_ref", None),
                            getattr(s, "cbs_without_ref_ci", None)):
            flags.append((s.setting, f"B* is {s.cbs:.3g} {_interval(s.cbs_ci)} with the reference point and "
                                     f"{s.cbs_without_ref:.3g} {_interval(s.cbs_without_ref_ci)} without it: the "
                                     "reference cell decides this B*"))
        if beyond_intervals(s.cbs, s.cbs_ci, s.cbs_empirical, getattr(s, "cbs_empirical_ci", None)):
            flags.append((s.setting, f"fitted B* {s.cbs:.3g} {_interval(s.cbs_ci)} and empirical B* "
                                     f"{s.cbs_empirical:.3g} {_interval(getattr(s, 'cbs_empirical_ci', None))} "
                                     "differ by more than their intervals: S(B) may not follow a + b/B here"))
        edges = [edge_phrase(p) for p in s.points if getattr(p, "lr_at_edge", False)]
        if edges:
            flags.append((s.setting, "best learning rate at an edge of the grid at B = "
                                     f"{', '.join(edges)}: the optimum may lie beyond it"))
    return flags


#: What :func:`d_ordering` compares: ``(label, attribute of a setting's analysis)``.
D_ORDERING_QUANTITIES = (("B*", "cbs"), ("B* without B_ref", "cbs_without_ref"),
                         ("B_noise", "b_noise"), ("B_noise without B_ref", "b_noise_without_ref"))


def _rises(values: Sequence[float | None]) -> bool | None:
    """Whether ``values`` rise strictly, in order; ``None`` where one is missing."""
    if any(v is None or not math.isfinite(v) for v in values):
        return None
    return all(b > a for a, b in zip(values, values[1:]))


def d_ordering(table) -> list[dict[str, Any]]:
    """One row per model size that has two or more data sizes: whether ``B*`` and ``B_noise`` rise
    with ``D`` (the paper's finding, Zhang et al. 2025, §4), each with and without the reference
    point (the reference cell sets the target and ``S(B_ref)``, so a D-trend that only the
    reference point carries is no evidence). Each entry is ``True``, ``False`` or ``None`` (a fit
    missing), beside the values in order of ``D``; an ordering says nothing of its certainty (the
    laws' intervals do)."""
    groups: dict[float, list] = {}
    for s in table.settings:
        if s.n_params is not None and s.tokens is not None:
            groups.setdefault(float(s.n_params), []).append(s)
    rows = []
    for n_params, settings in sorted(groups.items()):
        settings = sorted(settings, key=lambda s: s.tokens)
        if len({s.tokens for s in settings}) < 2:
            continue
        row: dict[str, Any] = {"N": n_params, "D": [s.tokens for s in settings],
                               "settings": [s.setting for s in settings]}
        for label, attr in D_ORDERING_QUANTITIES:
            values = [getattr(s, attr, None) for s in settings]
            row[label] = {"values": values, "rises": _rises(values)}
        rows.append(row)
    return rows


def d_ordering_sentence(row: Mapping[str, Any]) -> str:
    """The page's line for one row of :func:`d_ordering`."""
    def says(label: str) -> str:
        entry = row[label]
        shown = " → ".join("—" if v is None else f"{v:.3g}" for v in entry["values"])
        verdict = {True: "rises with D", False: "does **not** rise with D", None: "cannot be read (a fit is missing)"}
        return f"{label} {verdict[entry['rises']]} ({shown})"

    d = " → ".join(f"{v / 1e3:.0f}k" if v < 1e6 else f"{v / 1e6:.3g}M" for v in row["D"])
    held = {True: "holds", False: "does not hold", None: "cannot be read"}[row["B* without B_ref"]["rises"]]
    return (f"N = {row['N']:,.0f}, D = {d}: the ordering by D **{held} without the reference point**. "
            + "; ".join(says(label) for label, _ in D_ORDERING_QUANTITIES) + ".")


def doubling_rows(table) -> list[dict[str, Any]]:
    """Each setting's seed-paired doubling ratios ``S(B)/S(2B)`` with their 95% intervals
    (DESIGN.md §1, "Shape before slope"): ``S_min(1 + B_noise/B)`` keeps every ratio in (1, 2)."""
    rows = []
    for s in table.settings:
        for d in s.doublings:
            ci = None if d.ci is None else (math.exp(d.ci[0]), math.exp(d.ci[1]))
            rows.append({
                "setting": s.setting,
                "doubling": f"S({d.batch_size})/S({d.batch_size_doubled})",
                "where": {"first": "first from B_ref", "beyond": "beyond the first", "below": "below B_ref"}[d.place],
                "ratio": d.ratio,
                "95% interval": _interval(ci),
                "seeds": len(d.seeds),
                "shape": "above 2: impossible for a + b/B" if d.above_two else "",
            })
    return rows


def lack_of_fit_rows(table) -> list[dict[str, Any]]:
    """Per setting, the lack-of-fit F test of ``S_min(1 + B_noise/B)`` against the seeds' noise."""
    return [{
        "setting": s.setting,
        "F": s.lack_of_fit.f,
        "dof": f"{s.lack_of_fit.dof_fit}, {s.lack_of_fit.dof_noise}",
        "p": s.lack_of_fit.p_value,
        "a + b/B": "misses the points beyond noise" if s.lack_of_fit.rejected else "within noise",
    } for s in table.settings if s.lack_of_fit is not None]


def trend_rows(table) -> list[dict[str, Any]]:
    """Per law, the slope of each doubling's ``ln S(B)/S(2B)`` per e-fold of its variable (seed-paired,
    seed fixed effect) and the doublings beyond the first pooled: which doublings carry the trend."""
    rows = []
    for shape in table.shapes:
        unit = "D" if shape.variable == "d" else "N"
        trends = [(f"ln S({t.doublings[0][0]})/S({t.doublings[0][1]})", t) for t in shape.trends]
        if shape.beyond is not None:
            trends.append(("every doubling beyond the first, pooled", shape.beyond))
        for label, t in trends:
            rows.append({
                "law": shape.source,
                "ratio": label,
                "slope per e-fold": t.slope,
                "95% interval": _interval(t.ci),
                "of": unit,
                "trend": "rises" if t.positive else "falls" if t.negative else "none seen",
                "dof": t.dof,
            })
    return rows


def noise_rows(table) -> list[dict[str, Any]]:
    """The study's noise of ``ln S`` by source (sd, with degrees of freedom) and its learning-rate
    curvature: what the simulator's ``--noise lab`` draws."""
    noise = table.noise
    if noise is None:
        return []
    rows = [
        {"part": "rate-level (a trial about its cell's parabola in ln η)", "sd of ln S": noise.rate_sd,
         "dof": noise.rate_dof},
        {"part": "seed × cell (a seed's cell about the additive table)", "sd of ln S": noise.seed_cell_sd,
         "dof": noise.seed_cell_dof},
        {"part": "seed-common (a seed's shift at every B; cancels in B*)", "sd of ln S": noise.seed_common_sd,
         "dof": noise.seed_common_dof},
    ]
    if noise.curvature is not None:
        rows.append({"part": "learning-rate curvature k (ln S = … + k·ln²(η/η*), median)",
                     "sd of ln S": noise.curvature, "dof": len(noise.curvatures)})
    return [r for r in rows if r["sd of ln S"] is not None]


def other_law_rows(table) -> list[dict[str, Any]]:
    """The laws of B* without the reference point and of the empirical B* (the paper's rule read
    off the points), beside the fitted ones: a trend that only the reference point or the fitted form
    carries shows here."""
    rows = []
    for label, laws in (("without B_ref", table.scaling_without_ref), ("empirical B*", table.scaling_empirical)):
        if laws is None:
            continue
        for law in laws.laws:
            rows.append({"B*": label, "law": f"{'N' if law.variable == 'n' else 'D'} {_law_where(law)}",
                         "exponent": law.exponent, "95% interval": _interval(law.exponent_ci),
                         "settings": len(law.x)})
        if laws.joint is not None:
            j = laws.joint
            rows.append({"B*": label, "law": "joint, N", "exponent": j.exponent_n,
                         "95% interval": _interval(j.exponent_n_ci), "settings": len(j.cbs)})
            rows.append({"B*": label, "law": "joint, D", "exponent": j.exponent_d,
                         "95% interval": _interval(j.exponent_d_ci), "settings": len(j.cbs)})
    return rows

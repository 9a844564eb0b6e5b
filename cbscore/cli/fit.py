"""``cbs fit TABLE.csv``: steps-to-target table in, S(B) fits, CBS and scaling laws out.

Works on any steps table (one row per trial: ``setting,batch_size,steps`` and optionally
``n_params,tokens,context,outcome,seed,budget_steps``), a published one included, with no
training at all.
"""

from __future__ import annotations

import argparse
import json
import math
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fit",
        help="fit S(B), the critical batch size and its scaling laws to a steps table",
        description=(
            "Fit S(B) = a + b/B on log S per setting, the critical batch size "
            "B* = (1 + r)·B_ref + r·B_noise with a bootstrap interval, the empirical B*, and the "
            "power laws of B* in N at fixed D, in D at fixed N, in N with D ∝ N and in both, each "
            "only across the settings that define it. TABLE.csv has one row per trial with columns "
            "setting,batch_size,steps and optionally n_params,tokens,context,outcome,seed,budget_steps "
            "('-' reads standard input)."
        ),
    )
    parser.add_argument("table", metavar="TABLE.csv", help="steps table (CSV), or '-' for stdin")
    parser.add_argument("--b-ref", type=float, default=256.0, help="reference batch size B_ref in sequences (default 256)")
    parser.add_argument("--overhead", type=float, default=0.2, help="overhead r of the CBS rule (default 0.2)")
    parser.add_argument("--free-alpha", action="store_true", help="also fit S(B) = a + b·B^-alpha, reported beside")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples per setting; 0 for none (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    parser.add_argument("--estimator", choices=("fit", "min"), default="fit",
                        help="S(B) per batch size: a fit across the learning rates of the 'lr' column (default), "
                             "or the paper's minimum over them; the minimum is reported beside either way")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument("--es", action="store_true",
                        help="also fit E(S) = B·S against S per setting, the classical hyperbola and the quadratic "
                             "stage of the revised WSD form (Zhou/Huang et al. 2026), on each (B, seed)'s fewest "
                             "steps, and say which fits better (docs/schedules.md); adds 'es_fits'")
    parser.add_argument("--forecast", metavar="FORECAST.json", default=None,
                        help="calibrate a noise-scale forecast (the 'forecast' key of `cbs study fit --json`, "
                             "or a report's forecast.json) against this table's fit; adds 'calibration'")
    parser.set_defaults(handler=run_fit)


def run_fit(args: argparse.Namespace) -> int:
    from cbscore.analysis import analyze_table, read_steps_csv

    rows = read_steps_csv(sys.stdin if args.table == "-" else args.table)
    analysis = analyze_table(
        rows,
        b_ref=args.b_ref,
        overhead=args.overhead,
        free_alpha=args.free_alpha,
        bootstrap=args.bootstrap,
        seed=args.seed,
        estimator=args.estimator,
    )
    calibration = None if args.forecast is None else calibrate_file(args.forecast, analysis, args.bootstrap, args.seed)
    es_fits = es_fits_of(rows) if args.es else None
    if args.json:
        out = analysis.to_json_dict()
        if calibration is not None:
            out["calibration"] = calibration.to_json_dict()
        if es_fits is not None:
            out["es_fits"] = {name: None if fit is None else fit.to_dict() for name, fit in es_fits.items()}
        print(json.dumps(out, indent=2, allow_nan=False))
    else:
        print(format_analysis(analysis))
        if calibration is not None:
            print(format_calibration(calibration))
        if es_fits is not None:
            from cbscore.analysis import format_es

            for name, fit in es_fits.items():
                print(f"E(S) {name}: fewer than 3 reached points" if fit is None else "\n".join(format_es(name, fit)))
    return 0


def es_fits_of(rows) -> dict:
    """Each setting's :func:`cbscore.analysis.fit_wsd_es` (``None`` with fewer than three points)."""
    from cbscore.analysis import es_points, fit_wsd_es

    return {name: fit_wsd_es(b, s) if len(s) >= 3 else None for name, (b, s) in es_points(rows).items()}


def calibrate_file(path: str, analysis, bootstrap: int, seed: int):
    """:func:`cbscore.analysis.calibrate` of the forecasts in ``path`` against ``analysis``."""
    from cbscore.analysis import NoiseForecast, calibrate
    from cbscore.errors import ConfigError

    try:
        data = json.loads(open(path).read())
    except (OSError, ValueError) as exc:
        raise ConfigError("--forecast", path, f"is not a readable JSON file ({exc.__class__.__name__})") from None
    block = data.get("forecast", data) if isinstance(data, dict) else None
    entries = block.get("settings") if isinstance(block, dict) else None
    if not isinstance(entries, list):
        raise ConfigError("--forecast", path, "must hold a 'forecast' object with a 'settings' list")
    fields = ("setting", "b_run", "b_hat", "s_min", "e_min", "target_step", "n_values", "cbs")
    try:
        forecasts = [NoiseForecast(**{k: e[k] for k in fields}, run_id=str(e.get("run_id", ""))) for e in entries]
    except (KeyError, TypeError) as exc:
        raise ConfigError("--forecast", path, f"has a forecast entry without {exc}") from None
    return calibrate(forecasts, analysis.settings, n_resamples=max(bootstrap, 1), seed=seed)


def format_calibration(cal) -> str:
    """The text of a calibration: the factor with its interval, and each setting's ratio."""
    if cal.factor is None:
        return "calibration: no setting has both a forecast and a fitted B_noise"
    ci = "" if cal.factor_ci is None else f" [{cal.factor_ci[0]:.3g}, {cal.factor_ci[1]:.3g}]"
    lines = [f"calibration c = measured B_noise / B̂ = {cal.factor:.3g}{ci} ({cal.method})"]
    for r in cal.settings:
        lines.append(f"  {r.setting:<24} B_noise {r.b_noise:.4g} / B̂ {r.b_hat:.4g} = {r.ratio:.3g}")
    if cal.spread is not None:
        ratios = [r.ratio for r in cal.settings]
        lines.append(f"  spread over settings: sd of ln c = {cal.spread:.3g} (c from {min(ratios):.3g} to {max(ratios):.3g}); "
                     "one factor serves only where the settings agree")
    for n, forecast, measured, k in cal.d_trends:
        lines.append(f"  at N = {n:.4g} ({k} settings): the forecast B̂ grows as D^{forecast:.2f}, the measured "
                     f"B_noise as D^{measured:.2f}")
    lines += [f"note: {e}" for e in cal.errors]
    return "\n".join(lines)


def _g(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}g}"


def _ci(ci: tuple[float, float] | None, digits: int = 4) -> str:
    return "" if ci is None else f" [{_g(ci[0], digits)}, {_g(ci[1], digits)}]"


def _table(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = lambda cells: indent + "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return [line(header), *(line(r) for r in rows)]


def _law_lines(law, form: str, sym: str) -> list[str]:
    """One law of one group: its exponent, and its coefficient raw and in the paper's units."""
    name = "N" if law.variable == "n" else "D"
    raw_unit = "parameters" if law.variable == "n" else "tokens"
    paper_unit = "millions" if law.variable == "n" else "billions"
    if law.fixed_name == "tokens":
        where = "at fixed D" + (f" = {_g(law.fixed_value)}" if law.fixed_value is not None else " (not given)")
    elif law.fixed_name == "n_params":
        where = "at fixed N" + (f" = {_g(law.fixed_value)}" if law.fixed_value is not None else " (not given)")
    else:
        where = f"with D ∝ N ({_g(law.fixed_value, 3)} tokens per parameter)"
    return [
        f"  {form} {where} ({len(law.x)} settings: {', '.join(law.settings)}): "
        f"{sym} = {law.exponent:.3f}{_ci(law.exponent_ci, 3)}, R² = {_g(law.r2, 3)}",
        f"      c = {_g(law.coef)}{_ci(law.coef_ci)} ({name} in {raw_unit}); "
        f"c = {_g(law.coef_paper_units)}{_ci(law.coef_paper_units_ci)} ({name} in {paper_unit})",
    ]


def _shape_lines(s) -> list[str]:
    """A setting's seeds, its interval's degrees of freedom, doubling ratios and lack-of-fit test."""
    out = []
    if s.seed_table is not None and s.bootstrap is not None:
        how = (f"{s.seed_table.n_seeds} seeds as clusters: the interval rests on the seed × cell noise with "
               f"{s.bootstrap.dof} dof" if s.bootstrap.methods and s.bootstrap.methods[0] == "seeds" else
               f"one seed: the interval rests on the fit's residuals with {s.bootstrap.dof} dof (noise and misfit mixed)")
        out.append(f"  {how}")
    if s.doublings:
        cells = []
        for d in s.doublings:
            ci = "" if d.ci is None else f" [{math.exp(d.ci[0]):.3f}, {math.exp(d.ci[1]):.3f}]"
            flag = "  > 2: impossible for a + b/B" if d.above_two else ""
            cells.append(f"S({d.batch_size})/S({d.batch_size_doubled}) = {d.ratio:.3f}{ci}{flag}")
        out.append("  doubling ratios (within each seed, then averaged): " + "; ".join(cells))
    if s.knee is not None:
        where = "past the largest doubling" if math.isinf(s.knee) else f"{s.knee:.3g}{_ci(s.knee_ci, 3)}"
        out.append(f"  knee (where a doubling first costs a third more tokens; B_noise/2 on the fitted form): B = {where}")
    elif s.doublings:
        out.append(f"  knee: below the smallest doubling (doubling from B = {s.doublings[0].batch_size} already costs "
                   "a third more tokens)")
    if s.lack_of_fit is not None:
        lof = s.lack_of_fit
        verdict = "rejected" if lof.rejected else "not rejected"
        out.append(f"  lack of fit of S_min(1 + B_noise/B): F = {lof.f:.3g} on ({lof.dof_fit}, {lof.dof_noise}) dof, "
                   f"p = {lof.p_value:.2g} ({verdict} at 5%)")
    return out


def _noise_lines(noise) -> list[str]:
    """The study's noise of ln S by source."""
    if noise is None or (noise.seed_cell_sd is None and noise.rate_sd is None):
        return []
    sd = lambda v: "—" if v is None else f"{v:.3f}"  # noqa: E731
    out = ["", "noise of ln S (sd, pooled over settings; the simulator's --noise lab draws these)"]
    out.append(f"  rate-level {sd(noise.rate_sd)} ({noise.rate_dof} dof)   seed × cell {sd(noise.seed_cell_sd)} "
               f"({noise.seed_cell_dof} dof)   seed-common {sd(noise.seed_common_sd)} ({noise.seed_common_dof} dof, "
               f"{noise.n_settings} settings)")
    if noise.curvature is not None:
        out.append(f"  learning-rate curvature k of log S = … + k·ln²(η/η*): median {noise.curvature:.3f} "
                   f"(per setting {', '.join(f'{k:.3f}' for k in noise.curvatures)})")
    return out


def format_analysis(analysis) -> str:
    """Readable tables: per setting its points, fit, B* and sensitivity; then the scaling laws."""
    level = "95%"
    r, b_ref = analysis.overhead, analysis.b_ref
    out: list[str] = [f"CBS fit: S(B) = a + b/B on log S; B* at r = {r:g}, B_ref = {b_ref:g}",
                      "S(B) per batch size: read off a fit across its learning rates where rates are known (estimator "
                      "'fit'), else their minimum; 'min' is the paper's minimum beside it", ""]
    for s in analysis.settings:
        meta = [f"N = {_g(s.n_params)}" if s.n_params else "", f"D = {_g(s.tokens)}" if s.tokens else ""]
        out.append(f"setting {s.setting!r}  " + "  ".join(m for m in meta if m))
        rows = [
            [str(p.batch_size),
             f"≥ {_g(p.steps_lower_bound, 6)}" if p.steps_lower_bound is not None else _g(p.steps, 6),
             "—" if p.steps_min is None else _g(p.steps_min, 6),
             _g(s.fit(p.batch_size), 6) if s.fit else "—",
             str(p.n_reached), str(p.n_censored), str(p.n_diverged), str(p.n_other)]
            for p in s.points
        ]
        out += _table(["B", "S(B)", "min", "fit", "reached", "censored", "diverged", "other"], rows)
        if s.fit is not None:
            boot = s.bootstrap
            out.append(
                f"  S_min = {_g(s.s_min)}{_ci(boot.s_min_ci if boot else None)}   "
                f"B_noise = {_g(s.b_noise)}{_ci(boot.b_noise_ci if boot else None)}   R² = {s.r2:.4f}"
            )
            extrapolated = "  (above the largest measured B)" if s.extrapolated else ""
            out.append(
                f"  B* = {_g(s.cbs)}{_ci(s.cbs_ci)}{'  ' + level + ' CI' if s.cbs_ci else ''}"
                f"{extrapolated}   empirical B* = {_g(s.cbs_empirical)}{_ci(s.cbs_empirical_ci)}"
            )
            if s.fit_without_ref is not None:
                out.append(
                    f"  without the reference point B_ref = {b_ref:g}: B_noise = {_g(s.b_noise_without_ref)}"
                    f"{_ci(s.b_noise_without_ref_ci)}   B* = {_g(s.cbs_without_ref)}{_ci(s.cbs_without_ref_ci)}"
                )
            out += _shape_lines(s)
            if s.fit_free is not None:
                f = s.fit_free
                out.append(
                    f"  free exponent: S = a + b·B^-alpha, alpha = {f.alpha:.3f}, S_min = {_g(f.s_min)}, "
                    f"B_noise = {_g(f.b_noise)}, B* = {_g(s.cbs_free)}, R² = {f.r2:.4f}"
                )
            overheads = sorted({row.overhead for row in s.sensitivity})
            b_refs = sorted({row.b_ref for row in s.sensitivity})
            cell = {(row.b_ref, row.overhead): row for row in s.sensitivity}
            out.append("  sensitivity of B* (fitted / empirical):")
            out += _table(
                ["B_ref", *(f"r={o:g}" for o in overheads)],
                [
                    [f"{b:g}", *(f"{_g(cell[b, o].cbs)} / {_g(cell[b, o].cbs_empirical)}" for o in overheads)]
                    for b in b_refs
                ],
                indent="    ",
            )
        out.append("")
    laws = analysis.scaling
    out.append(
        "scaling laws of B* (power laws on log axes; 95% intervals: a pairs bootstrap over settings, "
        "each drawing from its own bootstrap)"
    )
    kinds = (
        (laws.n_laws, "B* = c·N^alpha", "alpha", "at fixed D"),
        (laws.d_laws, "B* = c·D^beta", "beta", "at fixed N"),
        (laws.chinchilla, "B* = c·N^alpha", "alpha", "with D ∝ N (N and D together)"),
    )
    for group, form, sym, where in kinds:
        if not group:
            out.append(f"  {form} {where}: —")
        for law in group:
            out += _law_lines(law, form, sym)
    j = laws.joint
    if j is None:
        out.append("  B* = c·N^alpha·D^beta: —")
    else:
        out.append(
            f"  B* = c·N^alpha·D^beta ({len(j.cbs)} settings): alpha = {j.exponent_n:.3f}{_ci(j.exponent_n_ci, 3)}, "
            f"beta = {j.exponent_d:.3f}{_ci(j.exponent_d_ci, 3)}, R² = {_g(j.r2, 3)}"
        )
        out.append(
            f"      c = {_g(j.coef)} (N in parameters, D in tokens); "
            f"c = {_g(j.coef_paper_units)}{_ci(j.coef_paper_units_ci)} (N in millions, D in billions)"
        )
    for title, other in (("without the reference point", analysis.scaling_without_ref),
                         ("of the empirical B* (the paper's rule read off the points)", analysis.scaling_empirical),
                         ("of the knee (where a doubling first costs a third more tokens: B_noise/2 without the fitted form)",
                          analysis.scaling_knee)):
        if other is None:
            continue
        out.append(f"  laws {title}:")
        for law in other.laws:
            out.append(f"    {law.variable.upper()}-exponent {law.exponent:.3f}{_ci(law.exponent_ci, 3)} "
                       f"({len(law.x)} settings: {', '.join(law.settings)})")
        if other.joint is not None:
            out.append(f"    joint: N-exponent {other.joint.exponent_n:.3f}{_ci(other.joint.exponent_n_ci, 3)}, "
                       f"D-exponent {other.joint.exponent_d:.3f}{_ci(other.joint.exponent_d_ci, 3)}")
    out += _noise_lines(analysis.noise)
    if analysis.shapes:
        out += ["", "which doublings carry each law's trend (slope of ln S(B)/S(2B), seed-paired, seed fixed effect; "
                "↑/↓: 95% interval above/below 0)"]
        out += [f"  {shape.sentence()}" for shape in analysis.shapes]
    from cbscore.analysis import PAPER_EXPONENT_CHINCHILLA, PAPER_EXPONENT_D, PAPER_EXPONENT_N

    comparison = analysis.paper_comparison()
    out.append("")
    out.append("compared with Zhang et al. 2025 (exponent: this study [95%] / paper)")
    for label, estimate, paper in (
        ("D at fixed N (beta)", comparison.exponent_d, PAPER_EXPONENT_D),
        ("N at fixed D (alpha)", comparison.exponent_n, PAPER_EXPONENT_N),
        ("N with D ∝ N (Chinchilla)", comparison.exponent_chinchilla, PAPER_EXPONENT_CHINCHILLA),
    ):
        mine = "—" if estimate is None else f"{estimate.value:.3f}{_ci(estimate.ci, 3)}  ({estimate.source})"
        out.append(f"  {label}: {mine} / {paper:g}")
    out.append(f"  {comparison.sentence}")
    if analysis.errors:
        out += ["", "not fitted / notes:"] + [f"  - {e}" for e in analysis.errors]
    return "\n".join(out)

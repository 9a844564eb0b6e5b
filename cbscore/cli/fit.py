"""``cbs fit TABLE.csv``: steps-to-target table in, S(B) fits, CBS and scaling laws out.

Works on any steps table (one row per trial: ``setting,batch_size,steps`` and optionally
``n_params,tokens,context,outcome``), a published one included, with no training at all.
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
            "power laws of B* in N, D and both. TABLE.csv has one row per trial with columns "
            "setting,batch_size,steps and optionally n_params,tokens,context,outcome ('-' reads "
            "standard input)."
        ),
    )
    parser.add_argument("table", metavar="TABLE.csv", help="steps table (CSV), or '-' for stdin")
    parser.add_argument("--b-ref", type=float, default=256.0, help="reference batch size B_ref in sequences (default 256)")
    parser.add_argument("--overhead", type=float, default=0.2, help="overhead r of the CBS rule (default 0.2)")
    parser.add_argument("--free-alpha", action="store_true", help="also fit S(B) = a + b·B^-alpha, reported beside")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples per setting; 0 for none (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
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
    )
    if args.json:
        print(json.dumps(analysis.to_json_dict(), indent=2, allow_nan=False))
    else:
        print(format_analysis(analysis))
    return 0


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


def format_analysis(analysis) -> str:
    """Readable tables: per setting its points, fit, B* and sensitivity; then the scaling laws."""
    level = "95%"
    r, b_ref = analysis.overhead, analysis.b_ref
    out: list[str] = [f"CBS fit: S(B) = a + b/B on log S; B* at r = {r:g}, B_ref = {b_ref:g}", ""]
    for s in analysis.settings:
        meta = [f"N = {_g(s.n_params)}" if s.n_params else "", f"D = {_g(s.tokens)}" if s.tokens else ""]
        out.append(f"setting {s.setting!r}  " + "  ".join(m for m in meta if m))
        rows = [
            [str(p.batch_size), _g(p.steps, 6), _g(s.fit(p.batch_size), 6) if s.fit else "—",
             str(p.n_reached), str(p.n_censored), str(p.n_diverged), str(p.n_other)]
            for p in s.points
        ]
        out += _table(["B", "S(B)", "fit", "reached", "censored", "diverged", "other"], rows)
        if s.fit is not None:
            boot = s.bootstrap
            out.append(
                f"  S_min = {_g(s.s_min)}{_ci(boot.s_min_ci if boot else None)}   "
                f"B_noise = {_g(s.b_noise)}{_ci(boot.b_noise_ci if boot else None)}   R² = {s.r2:.4f}"
            )
            extrapolated = "  (above the largest measured B)" if s.extrapolated else ""
            out.append(
                f"  B* = {_g(s.cbs)}{_ci(s.cbs_ci)}{'  ' + level + ' CI' if s.cbs_ci else ''}"
                f"{extrapolated}   empirical B* = {_g(s.cbs_empirical)}"
            )
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
    out.append("scaling laws of B* (power laws on log axes)")
    for law, name, sym in ((laws.n, "N", "alpha"), (laws.d, "D", "beta")):
        if law is None:
            out.append(f"  B* = c·{name}^{sym}: —")
        else:
            out.append(
                f"  B* = c·{name}^{sym}: c = {_g(law.coef)}{_ci(law.coef_ci)}, "
                f"{sym} = {law.exponent:.3f}{_ci(law.exponent_ci, 3)}  ({len(law.x)} settings, R² = {_g(law.r2, 3)})"
            )
    j = laws.joint
    if j is None:
        out.append("  B* = c·N^alpha·D^beta: —")
    else:
        out.append(
            f"  B* = c·N^alpha·D^beta: c = {_g(j.coef)}, alpha = {j.exponent_n:.3f}{_ci(j.exponent_n_ci, 3)}, "
            f"beta = {j.exponent_d:.3f}{_ci(j.exponent_d_ci, 3)}  ({len(j.cbs)} settings)"
        )
    if analysis.errors:
        out += ["", "not fitted / notes:"] + [f"  - {e}" for e in analysis.errors]
    return "\n".join(out)

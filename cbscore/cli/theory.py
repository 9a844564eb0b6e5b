"""``cbs theory``: the least-squares theory of Zhang et al. 2025 (§4), run exactly, as a table of B* against D.

The simulator and the protocol live in :mod:`cbscore.theory`; this module parses, runs and prints.
"""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "theory",
        help="the CBS law in D of one-pass SGD on power-law least squares, computed exactly",
        description=(
            "Exact expected risk of one-pass mini-batch SGD on linear regression with spectrum "
            "λ_i = i^-a, source condition λ_i·w*_i² = i^-b and label noise σ² (d modes), for "
            "B = 1 … 4096 and η = η_crit(B)·0.95·2^-j (j = 1 … 11) to 3·10^6 steps; then Zhang et al.'s "
            "Definition 1 at each D (samples): the target at B_ref after D/B_ref steps, steps to target "
            "f(B), the empirical 20%% CBS, B_noise and the fitted CBS, and their laws in D beside the "
            "theory's exponents."
        ),
    )
    parser.add_argument("--a", type=float, default=1.5, help="spectrum exponent a > 1 (default 1.5)")
    parser.add_argument("--b", type=float, default=2.5, help="source exponent b > 1 (default 2.5)")
    parser.add_argument("--sigma2", type=float, default=1.0, help="label-noise variance σ² ≥ 0 (default 1)")
    parser.add_argument("--d", type=int, default=512, help="number of modes (default 512)")
    parser.add_argument("--p", type=float, default=0.0, help="preconditioner exponent: step η·λ_i^-p, 0 ≤ p < 1 (default 0)")
    parser.add_argument("--iterate", choices=("uniform", "ewa", "last"), default="uniform",
                        help="evaluate the uniform average of the iterates (default: the averaged SGD of Zhang et al. "
                             "§4), the EWA (minimised over τ) or the last iterate")
    parser.add_argument("--b-ref", type=int, default=4, help="reference batch size B_ref in samples (default 4)")
    parser.add_argument("--overhead", type=float, default=0.2, help="overhead r of the CBS rule (default 0.2)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(handler=run_theory_command)


def run_theory_command(args: argparse.Namespace) -> int:
    from cbscore.theory import Grid, Problem, run_theory

    problem = Problem(a=args.a, b=args.b, sigma2=args.sigma2, d=args.d, p=args.p)
    result = run_theory(problem, Grid(iterate=args.iterate), b_ref=args.b_ref, overhead=args.overhead)
    if args.json:
        print(json.dumps(result.to_json_dict(), indent=2, allow_nan=False))
    else:
        print(format_result(result))
    return 0


def format_result(result) -> str:
    """The table of B* and B_noise against D, the laws and the theory's exponents."""
    p = result.problem
    lines = [
        f"least squares: a = {p.a:g}, b = {p.b:g}, σ² = {p.sigma2:g}, d = {p.d}, p = {p.p:g}; "
        f"{result.grid.iterate} iterate; B_ref = {result.b_ref}, r = {result.overhead:g}",
        f"{'D (samples)':>12} {'target':>10} {'B* (points)':>12} {'B_noise':>10} {'B* (fit)':>10}",
    ]

    def cell(v, width):
        return f"{'—':>{width}}" if v is None else f"{v:>{width}.4g}"

    for s in result.settings:
        lines.append(f"{s.d_samples:>12.4g} {s.target:>10.4g} {cell(s.cbs_empirical, 12)} "
                     f"{cell(s.b_noise, 10)} {cell(s.cbs, 10)}")
    for name, label in (("cbs_empirical", "B* (points)"), ("b_noise", "B_noise"), ("cbs", "B* (fit)")):
        law = result.laws.get(name)
        if law is not None:
            lines.append(f"law in D, {label}: {law.coef:.4g}·D^{law.exponent:.3f}")
    th = result.theory
    paper = th["averaged"] if result.grid.iterate != "last" else th["last"]
    measured, points = result.laws.get("b_noise"), result.laws.get("cbs_empirical")
    if measured is not None and points is not None:
        which = "averaged SGD, Zhang et al. §4" if result.grid.iterate != "last" else "last iterate, docs/theory.md"
        lines.append(f"on this grid B_noise ∝ D^{measured.exponent:.3f} and B* (points) ∝ D^{points.exponent:.3f}, "
                     f"beside the theory's D^{paper:.3f} ({which})")
    lines.append(f"theory: averaged iterates D^{th['averaged']:.3f} (1 − a/min{{b, 2a+1}}, Zhang et al. §4 as quoted); "
                 f"last iterate D^{th['last']:.3f} ((b − 1)/(a + b − 1), derived in docs/theory.md)")
    errors = {k: v for s in result.settings for k, v in s.errors.items()}
    for k, v in errors.items():
        lines.append(f"note ({k}): {v}")
    return "\n".join(lines)

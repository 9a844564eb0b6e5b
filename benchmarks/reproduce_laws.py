"""The laws a reproduction report states (issue 27): the D-law at fixed N and the N-law at fixed D
of both B* and B_noise, each with and without the reference points, and the verdict.

    python benchmarks/reproduce_laws.py docs/results/reproduce/trials.csv --b-ref 4 --overhead 0.2 \
        [--json laws.json]

The settings' fits are :func:`cbscore.analysis.analyze_table`'s (the pages' and ``cbs fit``'s: a fit
across learning rates, 1,000 resamples, seed 0). The laws are :func:`cbscore.analysis.
fit_scaling_laws` over each quantity: with the reference point from each setting's own bootstrap
samples (B* from ``cbs_samples``, B_noise from ``b_noise_samples``); without it the analysis keeps
only each setting's 95% interval, so its draws are log-normal with that interval (σ = ln(hi/lo) /
(2·1.96)), an approximation said in the output. B* = (1 + r)·B_ref + r·B_noise (DESIGN.md §1) and
B_noise = B / (S(B)/S_min − 1) at the fit (McCandlish et al. 2018, eq. 2.11). The verdict is
:func:`cbscore.analysis.compare_with_paper`'s, read off the paired draws of β_D and α_N.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cbscore.analysis import analyze_table, read_steps_csv  # noqa: E402
from cbscore.analysis._paper import compare_with_paper  # noqa: E402
from cbscore.analysis._scaling import fit_scaling_laws  # noqa: E402

Z95 = 1.959964


def _lognormal(value: float, ci, name: str, n: int) -> np.ndarray | None:
    if value is None or ci is None or not all(v and math.isfinite(v) and v > 0 for v in (value, *ci)):
        return None
    sigma = math.log(ci[1] / ci[0]) / (2 * Z95)
    rng = np.random.default_rng([7, zlib.crc32(name.encode())])
    return value * np.exp(sigma * rng.standard_normal(n))


def quantities(table, n_draws: int = 1000) -> dict[str, dict]:
    """Per quantity ("B*", "B_noise", each "with/without B_ref"): settings, values and draws."""
    out = {}
    for label, getter in (
        ("B* with B_ref", lambda s: (s.cbs, None if s.bootstrap is None else s.bootstrap.cbs_samples)),
        ("B_noise with B_ref", lambda s: (s.b_noise, None if s.bootstrap is None else s.bootstrap.b_noise_samples)),
        ("B* without B_ref", lambda s: (s.cbs_without_ref, _lognormal(s.cbs_without_ref, s.cbs_without_ref_ci,
                                                                      s.setting, n_draws))),
        ("B_noise without B_ref", lambda s: (s.b_noise_without_ref, _lognormal(
            s.b_noise_without_ref, s.b_noise_without_ref_ci, s.setting + "#noise", n_draws))),
    ):
        rows = []
        for s in table.settings:
            value, draws = getter(s)
            if value is None or not math.isfinite(value) or value <= 0:
                continue
            rows.append((s.setting, s.n_params, s.tokens, float(value), draws))
        out[label] = rows
    return out


def laws(rows: list, n_draws: int = 1000) -> dict:
    names = [r[0] for r in rows]
    draws = [r[4] for r in rows]
    samples = draws if all(d is not None and len(d) == n_draws for d in draws) else None
    fitted = fit_scaling_laws(names, [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows],
                              [np.asarray(d, dtype=float) for d in samples] if samples else None, n_draws=n_draws)

    def one(law):
        return {"settings": list(law.settings), "fixed": law.fixed_name, "fixed_value": law.fixed_value,
                "exponent": law.exponent, "exponent_ci": list(law.exponent_ci) if law.exponent_ci else None,
                "r2": law.r2}

    comparison = compare_with_paper(fitted)
    return {"d_laws": [one(x) for x in fitted.d_laws], "n_laws": [one(x) for x in fitted.n_laws],
            "verdict": comparison.verdict, "reason": comparison.reason,
            "values": {r[0]: r[3] for r in rows}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table")
    parser.add_argument("--b-ref", type=int, required=True)
    parser.add_argument("--overhead", type=float, default=0.2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    table = analyze_table(read_steps_csv(args.table), b_ref=args.b_ref, overhead=args.overhead, bootstrap=1000, seed=0)
    report = {label: laws(rows) for label, rows in quantities(table).items()}
    report["note"] = ("laws without B_ref draw each setting log-normally from its 95% interval (the analysis keeps no "
                      "samples of the fit without the reference point)")
    for label, r in report.items():
        if label == "note":
            continue
        for kind in ("d_laws", "n_laws"):
            for law in r[kind]:
                ci = law["exponent_ci"]
                ci_text = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "(no interval)"
                what = "D at fixed N" if kind == "d_laws" else "N at fixed D"
                print(f"{label:<22} {what:<13} exponent {law['exponent']:+.3f} {ci_text}  over {', '.join(law['settings'])}")
        print(f"{label:<22} verdict: {r['verdict']} ({r['reason']})")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=float) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Power and calibration of the lab's *verdict* under the lab's own noise (issue 38).

The successor of ``power_reproduce.py``'s question ("would the reproduction see B* grow with D?"),
asked of the analysis as the pages run it: full-grid steps tables drawn by
:func:`cbscore.study.sim_tables.simulated_rows` with the noise components the lab measured on
``reproduce`` (a seed's shift across every batch size, seed × cell noise, rate-level noise about a
parabola in ln η of the measured curvature), truths that are and are not of the fitted form, and
per table :func:`cbscore.analysis.analyze_table` (seed-clustered bootstrap) and
:meth:`TableAnalysis.paper_comparison` (the verdict with its shape checks).

Truths (``B_ref = 4``, ``B_noise`` in sequences, ``D_mid`` the geometric middle of the D arm):

- ``null``: ``B_noise = 15`` at every setting, ``S_min(1 + B_noise/B)``;
- ``small-batch``: the same ``B_noise``, and ``ln S`` at ``B < 2·B_ref`` raised by
  ``0.084·ln(D/D_mid)`` (the first-doubling trend measured on ``reproduce``: a small-batch effect
  that grows with D while the knee stays put);
- ``knee``: ``B_noise = 15·(D/D_mid)^0.3`` (the paper's mechanism, a knee that moves with D);
- ``knee+small-batch``: both.

Per design and truth it reports the share of verdicts (supported / not / inconclusive), the
coverage of the D- and N-exponents' 95% intervals (truth: the least-squares slope of ln B*_true,
by the paper's rule on the true curve, over the law's settings), and per setting the median bias
of ln B* and the coverage of its interval. Wall time is printed per design.

    .venv/bin/python benchmarks/power_verdict.py --seeds 200 --out docs/results/reproduce-design/verdict-power
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cbscore.analysis import analyze_table  # noqa: E402
from cbscore.study.sim_tables import LAB_NOISE, SimSetting, TruthShape, simulated_rows  # noqa: E402

B_REF, OVERHEAD, B_NOISE_MID = 4, 0.2, 15.0
#: The first-doubling D-trend measured on ``reproduce`` (per e-fold of D, seed-paired).
SMALL_BATCH_SLOPE = 0.084
KNEE_EXPONENT = 0.3
TRUTHS = ("null", "small-batch", "knee", "knee+small-batch")
#: Designs: (N, D) settings, batch sizes, seeds. ``reproduce`` is the committed study's design.
N0 = 98_304
DESIGNS = {
    "reproduce": ([(N0, 31_250), (N0, 78_750), (N0, 198_400), (N0, 500_000), (331_776, 78_750), (786_432, 78_750)],
                  (4, 8, 16, 32), 2),
    "reproduce-3-seeds": ([(N0, 31_250), (N0, 78_750), (N0, 198_400), (N0, 500_000), (331_776, 78_750),
                           (786_432, 78_750)], (4, 8, 16, 32), 3),
    "ladder-5-settings": ([(N0, 31_250), (N0, 125_000), (N0, 500_000), (331_776, 125_000), (786_432, 125_000)],
                          (4, 6, 8, 11, 16, 23, 32), 3),
    "ladder-3-settings-2-seeds": ([(N0, 31_250), (N0, 125_000), (N0, 500_000)], (4, 6, 8, 11, 16, 23, 32), 2),
    # Cheaper ladders for a two-hour CPU session (issue 39): 8× and 4× in D, two seeds.
    "ladder-8x-2-seeds": ([(N0, 31_250), (N0, 88_388), (N0, 250_000)], (4, 6, 8, 11, 16, 23, 32), 2),
    "ladder-4x-2-seeds": ([(N0, 31_250), (N0, 62_500), (N0, 125_000)], (4, 6, 8, 11, 16, 23, 32), 2),
    # The ladder as run this session (issue 39): 8× in D, B = 4–16, two seeds.
    "ladder-8x-b16-2-seeds": ([(N0, 31_250), (N0, 88_388), (N0, 250_000)], (4, 6, 8, 11, 16), 2),
}


def settings_for(design: str, truth: str) -> list[SimSetting]:
    """The design's settings with the named truth (see the module docstring)."""
    pairs = DESIGNS[design][0]
    d_arm = sorted({d for n, d in pairs if n == N0})
    d_mid = math.exp(np.mean(np.log(d_arm)))
    out = []
    for n, d in pairs:
        b_noise = B_NOISE_MID * ((d / d_mid) ** KNEE_EXPONENT if "knee" in truth else 1.0)
        bump = SMALL_BATCH_SLOPE * math.log(d / d_mid) if "small-batch" in truth else 0.0
        out.append(SimSetting(name=f"N{n}_D{d}", n_params=n, tokens=d,
                              truth=TruthShape(s_min=d / 500.0, b_noise=b_noise, small_batch_log=bump, b_ref=B_REF)))
    return out


def _slope(x, y) -> float:
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    return float(np.polyfit(lx, ly, 1)[0])


def run(design: str, truth: str, seeds: int, bootstrap: int) -> dict:
    """``seeds`` simulated tables of one design and truth, analysed as the pages analyse them."""
    settings = settings_for(design, truth)
    batch_sizes, n_seeds = DESIGNS[design][1], DESIGNS[design][2]
    true_cbs = {s.name: s.truth.cbs(OVERHEAD) for s in settings}
    verdicts = {"supported": 0, "not supported": 0, "inconclusive": 0}
    cover = {"d": [0, 0], "n": [0, 0]}
    per_setting = {s.name: {"log_err": [], "covered": 0, "with_ci": 0} for s in settings}
    first_doubling_named = 0
    beyond = {"positive": 0, "negative": 0, "checked": 0}
    first = {"positive": 0, "checked": 0}
    for i in range(seeds):
        rows = simulated_rows(settings, batch_sizes, seeds=n_seeds, noise=LAB_NOISE,
                              rng=np.random.default_rng([i, len(design), TRUTHS.index(truth)]))
        table = analyze_table(rows, b_ref=B_REF, overhead=OVERHEAD, bootstrap=bootstrap, seed=i)
        comparison = table.paper_comparison()
        verdicts[comparison.verdict] += 1
        first_doubling_named += "small-batch effect" in comparison.reason
        shape = next((sh for sh in table.shapes if sh.variable == "d" and sh.source.startswith("law in D")), None)
        if shape is not None and shape.beyond is not None:
            beyond["checked"] += 1
            beyond["positive"] += shape.beyond.positive
            beyond["negative"] += shape.beyond.negative
        if shape is not None and shape.first is not None:
            first["checked"] += 1
            first["positive"] += shape.first.positive
        for key, laws in (("d", table.scaling.d_laws), ("n", table.scaling.n_laws)):
            for law in laws:
                if law.exponent_ci is None or not all(map(math.isfinite, law.exponent_ci)):
                    continue
                xs = law.x
                truth_exp = _slope(xs, [true_cbs[name] for name in law.settings])
                cover[key][0] += law.exponent_ci[0] <= truth_exp <= law.exponent_ci[1]
                cover[key][1] += 1
        for s in table.settings:
            if s.cbs is None:
                continue
            per_setting[s.setting]["log_err"].append(math.log(s.cbs / true_cbs[s.setting]))
            if s.cbs_ci is not None and all(map(math.isfinite, s.cbs_ci)):
                per_setting[s.setting]["with_ci"] += 1
                per_setting[s.setting]["covered"] += s.cbs_ci[0] <= true_cbs[s.setting] <= s.cbs_ci[1]
    return {
        "design": design, "truth": truth, "seeds": seeds, "bootstrap": bootstrap,
        "verdicts": {k: v / seeds for k, v in verdicts.items()},
        "first_doubling_named": first_doubling_named / seeds,
        # The D law's doubling ratios: the later doublings pooled, and the first, with a D-slope above 0.
        "beyond_first_rises": beyond["positive"] / beyond["checked"] if beyond["checked"] else None,
        "beyond_first_falls": beyond["negative"] / beyond["checked"] if beyond["checked"] else None,
        "first_rises": first["positive"] / first["checked"] if first["checked"] else None,
        "coverage": {k: (v[0] / v[1] if v[1] else None) for k, v in cover.items()},
        "coverage_n_intervals": {k: v[1] for k, v in cover.items()},
        "settings": {
            name: {"true_cbs": true_cbs[name],
                   "median_bias_pct": 100 * (math.exp(float(np.median(v["log_err"]))) - 1) if v["log_err"] else None,
                   "rmse_ln": float(np.sqrt(np.mean(np.square(v["log_err"])))) if v["log_err"] else None,
                   "coverage": v["covered"] / v["with_ci"] if v["with_ci"] else None}
            for name, v in per_setting.items()
        },
    }


def format_line(r: dict) -> str:
    v, c = r["verdicts"], r["coverage"]
    cov = lambda x: "—" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    biases = [s["median_bias_pct"] for s in r["settings"].values() if s["median_bias_pct"] is not None]
    covs = [s["coverage"] for s in r["settings"].values() if s["coverage"] is not None]
    return (f"{r['design']:<26} {r['truth']:<17} supported {100 * v['supported']:5.1f}%  not {100 * v['not supported']:5.1f}%  "
            f"inconclusive {100 * v['inconclusive']:5.1f}%  small-batch named {100 * r['first_doubling_named']:5.1f}%  "
            f"D-trend beyond the first doubling {cov(r['beyond_first_rises'])} (falls {cov(r['beyond_first_falls'])}), "
            f"in the first {cov(r['first_rises'])}  "
            f"coverage D-exp {cov(c['d'])} N-exp {cov(c['n'])}  B* median bias {min(biases):+.1f}..{max(biases):+.1f}%  "
            f"B* coverage {cov(min(covs))}..{cov(max(covs))}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=200, help="simulated tables per design and truth (default 200)")
    parser.add_argument("--bootstrap", type=int, default=200, help="bootstrap resamples per setting (default 200)")
    parser.add_argument("--designs", nargs="*", default=list(DESIGNS), choices=list(DESIGNS))
    parser.add_argument("--truths", nargs="*", default=list(TRUTHS), choices=list(TRUTHS))
    parser.add_argument("--out", default=None, help="folder for power.json and power.txt")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.bootstrap < 1:
        parser.error(f"--seeds and --bootstrap must be positive, but got {args.seeds} and {args.bootstrap}")
    results, lines = [], []
    for design in args.designs:
        start = time.perf_counter()
        for truth in args.truths:
            r = run(design, truth, args.seeds, args.bootstrap)
            results.append(r)
            lines.append(format_line(r))
            print(lines[-1], flush=True)
        lines.append(f"  ({design}: {time.perf_counter() - start:.1f} s)")
        print(lines[-1], flush=True)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        noise = {k: getattr(LAB_NOISE, k) for k in ("seed_common_sd", "seed_cell_sd", "rate_sd", "lr_curvature")}
        (out / "power.json").write_text(json.dumps({"noise": noise, "results": results}, indent=1) + "\n")
        (out / "power.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

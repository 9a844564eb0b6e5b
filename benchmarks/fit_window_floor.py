"""How cheap can a study be that leaves B* where the full grid puts it? (issue 20)

Two measurements behind ``docs/results/cheaper-search/floor/``:

1. **The fit-window floor**, per paper preset at σ = 0.1: the tokens of the full grid's trials that
   its fit across rates reads (``cbscore.analysis.fit_window``), each to its stop at the target,
   and three reference rates to D per seed, against the oracle (``cbs study simulate`` prints the
   same ratio). A study that reads each of those crossings spends at least this; going below it
   means standing in a projection for a crossing the fit reads. ``--neighbours 1`` repeats it with a
   narrower window (the best rate and one rate on each side), and says whether that estimator still
   puts B* within ±2% of the truth.
2. **How well a crossing can be projected** from the first part of a run on the lab's own curves
   (``lab-curves.json``, made by ``benchmarks/calibrate_equal_tokens.py --templates``): each curve
   extrapolated to the target from a straight line in ``ln step`` through its last three
   evaluations before a fraction f of its own steps (the time-stretch projection the planner uses
   is measured by ``calibrate_equal_tokens.py``).
3. ``--breakdown PRESET``: where a study with the preset's defaults spends its tokens (the best
   trial, the rest of the fit's window, the reference cell, rates outside the window by outcome,
   re-runs), read from the simulated records of ``--seeds`` seeds.

Usage:

    python benchmarks/fit_window_floor.py [--seeds 50] [--neighbours 2 1] [--curves PATH] [--json]
    python benchmarks/fit_window_floor.py --breakdown paper-chinchilla --seeds 10

Simulation only; nothing is trained or written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PRESETS = ("paper-chinchilla", "paper-fixed-d", "paper-fixed-n")
DEFAULT_CURVES = Path(__file__).resolve().parents[1] / "docs/results/cheaper-search/lab-curves.json"
FRACTIONS = (0.5, 0.75, 0.85)


def floor_rows(seeds: int, neighbours: int) -> list[dict]:
    """Per preset: study/oracle (rules off), floor/oracle, and the estimator's criteria."""
    import cbscore.analysis._points as points
    from cbscore.study import simulate as sim
    from cbscore.study.presets import load_preset
    from cbscore.study.sim_trials import SimConfig

    saved = points.FIT_NEIGHBOURS
    points.FIT_NEIGHBOURS = neighbours  # the estimator's window, for the study and its full grid alike
    try:
        rows = []
        for name in PRESETS:
            spec = load_preset(name)
            d = sim.simulate(spec, sim.paper_truth(spec), SimConfig(noise_sigma=0.1), seeds=seeds).to_json_dict()
            settings = d["settings"]
            rows.append({
                "preset": name, "neighbours": neighbours, "seeds": seeds,
                "study_to_oracle": d["ratio_to_oracle_median"],
                "fit_window_to_oracle": d["fit_window_to_oracle_median"],
                "grid_to_target_to_oracle": d["tokens_grid_to_target_mean"] / d["tokens_oracle_mean"],
                "bias_vs_truth_range": [min(s["bias_vs_truth"] for s in settings),
                                        max(s["bias_vs_truth"] for s in settings)],
                "worst_share_off_grid_2pct": max(s["share_off_grid_2pct"] for s in settings),
            })
        return rows
    finally:
        points.FIT_NEIGHBOURS = saved


def projection_rows(curves_path: Path) -> list[dict]:
    """Per stopping fraction: |projected / real − 1| of the lab's curves extrapolated in ln step."""
    curves = json.loads(curves_path.read_text())["curves"]
    out = []
    for f in FRACTIONS:
        errors = []
        for c in curves:
            x, dl = np.asarray(c["x"], dtype=float), np.asarray(c["dl"], dtype=float)  # (n,), (n,)
            keep = x <= f
            if keep.sum() < 2:
                continue
            lx, d = np.log(x[keep])[-3:], dl[keep][-3:]
            slope, intercept = np.polyfit(lx, d, 1)  # dl = intercept + slope·ln x near the stop
            if slope >= 0:
                continue
            errors.append(float(np.exp(-intercept / slope) - 1.0))  # the crossing is at x = 1
        e = np.abs(errors)
        out.append({"fraction": f, "curves": len(errors), "of": len(curves),
                    "median_abs_error": float(np.median(e)) if len(e) else None,
                    "p90_abs_error": float(np.percentile(e, 90)) if len(e) else None,
                    "max_abs_error": float(e.max()) if len(e) else None})
    return out


def breakdown(name: str, seeds: int, budget_margin: float | None = None) -> dict[str, float]:
    """Shares of the oracle a study of ``name`` with its preset's defaults (``budget_margin``: that
    field instead) spends, by what each trial was."""
    from cbscore.analysis import TrialSteps, fit_window
    from cbscore.study import simulate as sim
    from cbscore.study.budgets import RERUN_TAG
    from cbscore.study.presets import load_preset
    from cbscore.study.sim_trials import SimConfig

    captured: dict = {}
    original = sim.setting_outcomes

    def keep(spec, simulated, records, p):  # the records a StudyOutcome does not carry
        captured["records"] = dict(records)
        return original(spec, simulated, records, p)

    spec = load_preset(name)
    if budget_margin is not None:
        spec = spec.replace(budget_margin=budget_margin)
    totals: dict[str, float] = {}
    sim.setting_outcomes = keep
    try:
        for seed in range(seeds):
            outcome = sim.simulate_once(spec, sim.paper_truth(spec), SimConfig(noise_sigma=0.1), seed)
            totals["oracle"] = totals.get("oracle", 0) + sum(x.tokens_oracle for x in outcome.settings)
            cells: dict[tuple, list] = {}
            for r in captured["records"].values():
                cells.setdefault((r.cell_id, r.seed), []).append(r)
            for recs in cells.values():
                if recs[0].role == "reference":
                    totals["reference cell"] = totals.get("reference cell", 0) + sum(r.tokens for r in recs)
                    continue
                first = [r for r in recs if not r.trial_id.endswith("." + RERUN_TAG)]
                reached = [TrialSteps(batch_size=r.batch_size, outcome="reached", steps=r.steps_to_target,
                                      lr=r.lr, seed=r.seed) for r in first if r.status == "reached"]
                window = {t.lr for t in fit_window(reached, sorted({r.lr for r in first}))} if reached else set()
                best = min(reached, key=lambda t: t.steps).lr if reached else None
                for r in recs:
                    kind = ("re-run" if r.trial_id.endswith("." + RERUN_TAG) else "best trial" if r.lr == best
                            else "fit window" if r.lr in window else f"outside the window, {r.status}")
                    totals[kind] = totals.get(kind, 0) + r.tokens
    finally:
        sim.setting_outcomes = original
    oracle = totals.pop("oracle")
    return {k: v / oracle for k, v in sorted(totals.items())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--neighbours", type=int, nargs="+", default=[2, 1])
    ap.add_argument("--curves", type=Path, default=DEFAULT_CURVES)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--breakdown", metavar="PRESET", help="where a study with the preset's defaults spends its tokens, instead")
    ap.add_argument("--budget-margin", type=float, default=None,
                    help="--breakdown: the preset with this budget_margin instead of its own")
    args = ap.parse_args(argv)
    if args.breakdown:
        shares = breakdown(args.breakdown, args.seeds, args.budget_margin)
        if args.json:
            print(json.dumps(shares, indent=1))
        else:
            for kind, share in shares.items():
                print(f"{kind:<32} {share:5.2f}× the oracle")
            print(f"{'study':<32} {sum(shares.values()):5.2f}× the oracle")
        return 0
    floors = [row for n in args.neighbours for row in floor_rows(args.seeds, n)]
    projections = projection_rows(args.curves)
    if args.json:
        print(json.dumps({"floor": floors, "projection": projections}, indent=1))
        return 0
    print("preset            window  study/oracle  floor/oracle  grid-to-target/oracle  vs truth         >2% off grid")
    for r in floors:
        lo, hi = r["bias_vs_truth_range"]
        print(f"{r['preset']:<17} ±{r['neighbours']:<6} {r['study_to_oracle']:>11.2f}× {r['fit_window_to_oracle']:>12.2f}× "
              f"{r['grid_to_target_to_oracle']:>21.2f}×  {lo:+.1%} to {hi:+.1%}  {r['worst_share_off_grid_2pct']:.0%}")
    print(f"\nprojection of the crossing from a straight line in ln step ({args.curves.name}):")
    for r in projections:
        if r["median_abs_error"] is None:
            print(f"  from {r['fraction']:.2f}·S: no curve has two evaluations there")
            continue
        print(f"  from {r['fraction']:.2f}·S: {r['curves']}/{r['of']} curves, |error| median {r['median_abs_error']:.1%}, "
              f"p90 {r['p90_abs_error']:.1%}, max {r['max_abs_error']:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

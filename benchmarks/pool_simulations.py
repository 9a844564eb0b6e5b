"""Pool ``cbs study simulate --json`` runs of one design on disjoint draws (e.g. studies 0–199 and
1000–1199, ``--first-seed``) into the three criteria's numbers over all their studies.

Run: ``python benchmarks/pool_simulations.py A.json B.json [...]`` (one design, one preset, one law;
the runs must name the same spec and settings). Prints the pooled study/oracle, each setting's and the
study's RMSE of ln B* against the full grid's on the same draws, and the precision-adjusted cost
``tokens/oracle × (RMSE/RMSE_grid)²`` (issue 40's criterion 3, ``cbscore.study.sim_report``), with
each run's own figure beside it.

How runs pool (the rule issue 40's fresh draws were judged by, written down before they ran): tokens
and oracle are averaged over all studies (each run weighted by its studies); each setting's mean
squared error of ln B* is averaged the same way, for the study and for its full grid; the study's
RMSE is the root of the sum over settings, as ``SimulationReport.criteria`` computes it for one run.
Median bias (criterion 2) does not pool: it is read per run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys


def _oracle(run: dict) -> float:
    return sum(s["tokens_oracle_mean"] for s in run["settings"])


def pool(runs: list[dict]) -> dict:
    """The pooled figures of ``runs`` (each a ``cbs study simulate --json`` dict)."""
    settings = [tuple(s["setting"] for s in r["settings"]) for r in runs]
    if len(set(settings)) != 1:  # (a spec's name may differ between runs: a copy of a preset renamed)
        raise SystemExit(f"pool_simulations: the runs must share their settings (got {sorted(set(settings))})")
    n = [r["seeds"] for r in runs]
    total = sum(n)

    def mean(values: list[float]) -> float:
        return sum(v * k for v, k in zip(values, n)) / total

    tokens = mean([r["tokens_study_mean"] for r in runs])
    oracle = mean([_oracle(r) for r in runs])
    rows = []
    for i, name in enumerate(settings[0]):
        ms = mean([r["settings"][i]["rmse_ln_cbs_study"] ** 2 for r in runs])
        mg = mean([r["settings"][i]["rmse_ln_cbs_grid"] ** 2 for r in runs])
        rows.append((name, math.sqrt(ms), math.sqrt(mg)))
    rmse = math.sqrt(sum(r[1] ** 2 for r in rows))
    rmse_grid = math.sqrt(sum(r[2] ** 2 for r in rows))
    return {"spec": " + ".join(dict.fromkeys(r["spec"] for r in runs)), "search": runs[-1].get("search"),
            "lr_law": runs[-1]["lr_law"], "studies": total,
            "study_to_oracle": tokens / oracle, "rmse": rmse, "rmse_grid": rmse_grid,
            "precision_adjusted": tokens / oracle * (rmse / rmse_grid) ** 2, "settings": rows,
            "each": [r["precision_adjusted_to_oracle"] for r in runs]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="cbs study simulate --json files of one design")
    args = parser.parse_args(argv)
    runs = [json.load(open(path)) for path in args.runs]
    p = pool(runs)
    each = ", ".join(f"{v:.2f}×" for v in p["each"])
    print(f"{p['spec']} ({p['search']}; {p['lr_law']}): {p['studies']} studies pooled")
    print(f"  study/oracle {p['study_to_oracle']:.2f}×, RMSE ln B* {p['rmse']:.3f} against the full grid's "
          f"{p['rmse_grid']:.3f}: precision-adjusted {p['precision_adjusted']:.2f}× (each run: {each})")
    for name, rmse, grid in p["settings"]:
        print(f"    {name}: RMSE {rmse:.3f} / grid {grid:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Calibrate the equal-token rules (issue 20) on a study's own loss curves.

For every cell of a finished study in which several learning rates reached the target, this takes
the leader (the rate with the fewest steps to target) and every other rate that reached, and asks
two questions of the real curves, at each stopping fraction f of the leader's steps:

1. **Projection** (``equal_token_fraction``): had the slower rate been stopped after f·S_leader
   steps, how far would its projected steps to target (``cbscore.analysis.steps_ratio`` against
   the leader's curve, times S_leader) have been from the steps it really needed?
2. **Margin** (``equal_token_margin``): the largest loss gap (nats, at equal steps) by which a rate
   that went on to cross *first* trailed the rate it beat at an evaluation from f of its own steps
   on: a margin below it, applied from then on, would have stopped the winner.

Usage (the study's ``CBS_HOME`` / ``CBS_TRACKING_URI`` in the environment):

    python benchmarks/calibrate_equal_tokens.py STUDY [--json]

It reads MLflow only; nothing is trained or written.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cbscore.analysis import first_crossing, steps_ratio  # noqa: E402
from cbscore.study.equal_tokens import loss_at_step  # noqa: E402

FRACTIONS = (0.1, 0.25, 0.5, 0.75)


def cells_of(name: str) -> dict[tuple, list[tuple[float, float, tuple, tuple]]]:
    """Per (setting, batch size, seed): (rate, steps to target, eval steps, eval losses) of every
    trial that reached the study's target (the reference runs crossing it included)."""
    from cbscore.study.targets import setting_targets
    from workers.query import api

    records = api.study_records(name)
    spec = api.study_spec(name)
    hist = api.study_histories(name)
    targets, _ = setting_targets(spec, records)
    out: dict[tuple, list] = {}
    for setting, histories in hist.items():
        target = targets.get(setting)
        if target is None:
            continue
        for h in histories:
            if h.role != "trial" and h.outcome not in ("finished", "reached", "censored"):
                continue
            crossing = first_crossing(h.steps, h.losses, target)
            if crossing is None:
                continue
            out.setdefault((setting, h.batch_size, h.seed), []).append((h.lr, crossing, h.steps, h.losses))
    return out


def calibrate(cells: dict) -> dict:
    rows = []
    for key, trials in sorted(cells.items()):
        if len(trials) < 2:
            continue
        lead = min(trials, key=lambda t: t[1])
        for lr, crossing, steps, losses in trials:
            if lr == lead[0]:
                continue
            row = {"cell": f"{key[0]}.b{key[1]}.s{key[2]}", "lr": lr, "lr_leader": lead[0],
                   "steps": crossing, "steps_leader": lead[1]}
            for f in FRACTIONS:
                upto = f * lead[1]
                n = sum(1 for s in steps if s <= upto)
                c = steps_ratio(steps[:n], losses[:n], lead[2], lead[3]) if n >= 2 else None
                row[f"projection_error_f{f:g}"] = None if c is None else c * lead[1] / crossing - 1.0
            rows.append(row)
    # The margin: gaps at equal steps by which a rate trailed the rate it went on to beat.
    gaps = []
    for trials in cells.values():
        for a in trials:
            for b in trials:
                if a is b or a[1] >= b[1]:
                    continue  # a crossed first; how far behind b was it, before either crossed?
                for s, la in zip(a[2], a[3]):
                    if s > a[1]:
                        break
                    lb = loss_at_step(b[2], b[3], s)
                    if lb is not None and math.isfinite(la):
                        gaps.append((la - lb, s / a[1]))
    summary = {}
    for f in FRACTIONS:
        errs = [abs(r[f"projection_error_f{f:g}"]) for r in rows if r[f"projection_error_f{f:g}"] is not None]
        errs.sort()
        summary[f"f{f:g}"] = {
            "projected": len(errs), "of": len(rows),
            "median_abs_error": errs[len(errs) // 2] if errs else None,
            "p90_abs_error": errs[min(len(errs) - 1, int(0.9 * len(errs)))] if errs else None,
            "max_abs_error": errs[-1] if errs else None,
            "max_winner_gap_nats": max((g for g, at in gaps if at >= f), default=None),
        }
    return {"pairs": rows, "summary": summary,
            "max_winner_gap_nats_any_time": max((g for g, _ in gaps), default=None)}


def templates(cells: dict) -> list[dict]:
    """Every reached trial's curve, normalised for ``cbs study simulate --curves``: steps as a share
    of its own steps to target, losses as nats above the target, keyed by ``ln(η/η_best)`` of its
    cell (the best: the rate with the fewest steps)."""
    out = []
    for trials in cells.values():
        best = min(trials, key=lambda t: t[1])
        for lr, crossing, steps, losses in trials:
            target_loss = loss_at_step(steps, losses, crossing)
            if target_loss is None:
                continue
            pts = [(s / crossing, v - target_loss) for s, v in zip(steps, losses) if s > 0 and math.isfinite(v)]
            out.append({"log_rate_ratio": math.log(lr / best[0]), "x": [p[0] for p in pts],
                        "dl": [p[1] for p in pts]})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--templates", metavar="PATH.json",
                        help="also write the normalised curves for `cbs study simulate --curves PATH.json`")
    args = parser.parse_args(argv)
    cells = cells_of(args.study)
    result = calibrate(cells)
    if args.templates:
        tmp = Path(f"{args.templates}.tmp")
        tmp.write_text(json.dumps({"study": args.study, "curves": templates(cells)}))
        tmp.replace(args.templates)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"study {args.study!r}: {len(result['pairs'])} (slower rate, leader) pairs that both reached the target")
    print(f"{'stopped at':>10} {'projected':>10} {'median |err|':>13} {'p90 |err|':>10} {'max |err|':>10} "
          f"{'winner gap (nats)':>18}")
    for f, s in result["summary"].items():
        def pct(x):
            return "—" if x is None else f"{x:.1%}"
        gap = "—" if s["max_winner_gap_nats"] is None else f"{s['max_winner_gap_nats']:+.4f}"
        print(f"{f[1:] + '·S':>10} {s['projected']:>4}/{s['of']:<5} {pct(s['median_abs_error']):>13} "
              f"{pct(s['p90_abs_error']):>10} {pct(s['max_abs_error']):>10} {gap:>18}")
    print("winner gap: the largest loss gap at equal steps by which a rate that crossed first trailed the rate it "
          "beat, from that fraction of its own steps on (a margin below it would have stopped a winner)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

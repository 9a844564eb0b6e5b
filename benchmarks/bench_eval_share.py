"""How much of a study's trial time goes to evaluation: a few of a preset's trials trained in this
process, as a worker trains them (the cell's recipe, budget, target and evaluation schedule from
:func:`cbscore.study.cell_trials.make_trial`), at the spec's ``eval_windows`` and at fewer.

    python benchmarks/bench_eval_share.py --preset demo --targets docs/results/demo/summary.json \
        --windows 64 32 16 --json /tmp/eval_share.json

Per trial it prints the training and evaluation seconds, the number of evaluations and the steps
to target; at the end, per window count, the evaluation share of the trials' time and, over the
trials run, the tokens per trial-second. It compares cost, not steps: the target is the one given
(``--targets``, measured at the spec's ``eval_windows``), and another set of windows has another loss
level, so at fewer windows a trial may stop elsewhere or not reach it (a study sets its target from
its own reference; ``docs/results/demo/eval-windows/`` compares whole studies). Budgets are the
cells' before the planner's step caps. Run it on quiet cores: it measures wall time.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import torch


def _trial_configs(preset: str, targets: dict[str, float], picks: list[tuple[str, int, float]]):
    from cbscore.study.cell_trials import make_trial
    from cbscore.study.presets import load_preset

    spec = load_preset(preset)
    settings = {s.setting_id: s for s in spec.resolve_settings()}
    for setting_id, batch_size, lr in picks:
        setting = settings[setting_id]
        role = "reference" if batch_size == spec.b_ref else "trial"
        trial = make_trial(spec, setting, batch_size=batch_size, role=role, lr=lr, seed=spec.seeds[0],
                           tag="bench", max_steps=None, target_loss=targets[setting_id])
        yield trial


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="demo")
    p.add_argument("--targets", required=True, help="a summary.json with a `targets` object per setting id")
    p.add_argument("--windows", type=int, nargs="+", default=[64, 16])
    p.add_argument("--pick", nargs="+", default=None, metavar="SETTING:B:LR",
                   help="trials to run (default: B = 2, 8, 32 at lr 0.012 of each setting)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads, as one of two workers on two cores")
    p.add_argument("--json", default=None, help="write the measurements here")
    args = p.parse_args(argv)

    from cbscore.train.config import TrainConfig
    from cbscore.train.trainer import train

    targets = json.load(open(args.targets))["targets"]
    if args.pick:
        picks = [(s, int(b), float(lr)) for s, b, lr in (x.split(":") for x in args.pick)]
    else:
        picks = [(s, b, 0.012) for s in targets for b in (2, 8, 32)]
    torch.set_num_threads(args.threads)
    rows = []
    for trial in _trial_configs(args.preset, targets, picks):
        for windows in args.windows:
            cfg = TrainConfig.from_dict({**trial.train_config, "eval_windows": windows, "threads": args.threads})
            t0 = time.perf_counter()
            result = train(cfg)
            wall = time.perf_counter() - t0
            row = {"setting": trial.setting_id, "batch_size": trial.batch_size, "lr": trial.lr,
                   "eval_windows": windows, "status": result.status, "steps": result.steps,
                   "steps_to_target": result.steps_to_target, "evals": len(result.eval_history),
                   "train_s": result.train_seconds, "eval_s": result.eval_seconds, "wall_s": wall,
                   "tokens": result.tokens}
            rows.append(row)
            print(f"{trial.setting_id:>16} B={trial.batch_size:<3} windows={windows:<3} {result.status:<8} "
                  f"steps {result.steps:>5} S={row['steps_to_target'] or float('nan'):8.1f} evals {row['evals']:>3} "
                  f"train {row['train_s']:6.1f} s eval {row['eval_s']:6.1f} s wall {wall:6.1f} s", flush=True)
    print("\nevaluation share of trial wall time (eval_s / wall_s, summed over the trials run):")
    for windows in args.windows:
        sel = [r for r in rows if r["eval_windows"] == windows]
        wall = sum(r["wall_s"] for r in sel)
        ev = sum(r["eval_s"] for r in sel)
        tr = sum(r["train_s"] for r in sel)
        toks = sum(r["tokens"] for r in sel)
        print(f"  windows {windows:>3}: eval {ev:7.1f} s, train {tr:7.1f} s, other {wall - ev - tr:6.1f} s, "
              f"eval share {ev / wall:.1%}, {toks / wall:,.0f} tokens per trial-second")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "machine": {"cpu": platform.processor() or platform.machine(),
                                                 "python": sys.version.split()[0], "torch": torch.__version__,
                                                 "threads": args.threads}, "argv": sys.argv[1:]}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

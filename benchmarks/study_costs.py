"""Where a finished study's trial time went, and how noisy its held-out evaluations are, read from
its MLflow runs (``docs/results/demo/eval-windows/``).

    CBS_HOME=.cbs/evalprobe python benchmarks/study_costs.py probe50k [--worker-log up.log]

Prints, over the study's trial runs, the trainer's own clocks summed (``summary/train_seconds``,
``summary/eval_seconds``), the first trial start and the last trial end, and, with ``--worker-log``
(the log of ``cbs up`` or ``cbs worker``), the task time the workers report (``succeeded in``: what
trials cost, queueing excluded).

Evaluation noise: for each trial, the last 8 *second differences* of its ``eval/loss_ewa`` curve in
log step, each divided by its own standard deviation under independent noise,
``(y_i − w₁·y_{i−1} − w₂·y_{i+1}) / √(1 + w₁² + w₂²)`` with ``w`` the linear-interpolation weights. Near
the crossing evaluations are dense, so the curve's own bend between neighbours is small against the
noise. It prints their pooled robust spread (1.4826·MAD, which a few bent early points do not move) and
their plain standard deviation.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SUCCEEDED = re.compile(r"run_trial\[(?P<task>[^\]]+)\] succeeded in (?P<s>[0-9.]+)s")


def second_differences(steps, losses, last: int = 8) -> np.ndarray:
    """The normalised second differences of a curve in log step (module docstring), its last ``last``."""
    x, y = np.log(np.asarray(steps, float)), np.asarray(losses, float)
    w2 = (x[1:-1] - x[:-2]) / (x[2:] - x[:-2])
    w1 = 1.0 - w2
    r = (y[1:-1] - w1 * y[:-2] - w2 * y[2:]) / np.sqrt(1.0 + w1**2 + w2**2)
    return r[-last:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("study")
    p.add_argument("--worker-log", type=Path, default=None)
    args = p.parse_args(argv)

    from workers.query import api
    from workers.tracking import Tracker

    tracker = api.open_tracker()
    parent = api.study_parent(tracker, args.study)
    runs = [r for r in tracker.trial_runs(parent.info.experiment_id, parent.info.run_id)
            if "summary/train_seconds" in r.data.metrics]
    train = sum(r.data.metrics["summary/train_seconds"] for r in runs)
    evals = sum(r.data.metrics["summary/eval_seconds"] for r in runs)
    start = min(r.info.start_time for r in runs) / 1000
    end = max(r.info.end_time for r in runs) / 1000
    print(f"{args.study}: {len(runs)} ended trials; trainer clocks: train {train:.1f} s, evaluation {evals:.1f} s; "
          f"first start to last end {end - start:.0f} s")
    if args.worker_log is not None:
        tasks = [float(m["s"]) for m in SUCCEEDED.finditer(args.worker_log.read_text())
                 if m["task"].startswith(args.study + ".")]
        total = sum(tasks)
        print(f"worker task time: {len(tasks)} tasks, {total:.1f} s: training {train / total:.0%}, "
              f"evaluation {evals / total:.0%}, other {(total - train - evals) / total:.0%}")
    diffs = []
    for r in runs:
        steps, losses = Tracker.history(tracker, r, "eval/loss_ewa")
        keep = [(s, v) for s, v in zip(steps, losses) if s >= 8]
        if len(keep) >= 8:
            diffs.append(second_differences(*zip(*keep)))
    if diffs:
        d = np.concatenate(diffs)
        mad = 1.4826 * np.median(np.abs(d - np.median(d)))
        print(f"evaluation noise over {len(diffs)} trials ({d.size} second differences): robust sd {mad:.5f} nats, "
              f"sd {d.std():.5f} nats")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

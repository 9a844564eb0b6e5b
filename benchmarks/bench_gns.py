"""Cost of measuring the gradient noise scale (issue 14): step time with and without it, on CPU.

Two questions, each answered by the real trainer (``cbscore.train.train``), A/B runs interleaved
and repeated so that a shared machine's drift hits both sides alike:

1. **The probe on a step that already accumulates** (``micro_batch_size`` splits the batch):
   ``measure_gns`` on against off, the same passes. This is the issue's "< 3% of step time":
   per micro-batch, one subtraction, one norm and one copy over the gradients, plus one host sync
   per log step (:class:`cbscore.gns.GnsProbe`).
2. **The opt-in split** of a batch that would run in one pass (``gns_micro_batch_size``): what a
   study pays for ``gns_micro_batch_size`` on small CPU batches (smaller matmuls, more passes), the
   probe included.

Step time is wall time of the whole run divided by its steps (evaluation only at step 0 and at
the end, of one window; the host sync at log steps counts, unlike in ``tokens_per_s``), and the
trainer's own ``train_seconds`` per step beside it.

    python benchmarks/bench_gns.py                      # tiny-0.8M, T 128, B 16: micro 4 and split 8
    python benchmarks/bench_gns.py --model tiny-0.1M --batch-size 8 --micro 2 --split 4 --steps 60
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def _run(args: argparse.Namespace, **changes) -> tuple[float, float]:
    """``(wall seconds per step, train seconds per step)`` of one trial."""
    from cbscore.data import DataConfig
    from cbscore.train import train
    from cbscore.train_config import TrainConfig

    config = TrainConfig(
        model=args.model, batch_size=args.batch_size, context_tokens=args.context,
        max_tokens=args.batch_size * args.context * args.steps, lr=1e-3, ewa_taus=(0.999,), eval_windows=1,
        eval_every_steps=10**9, log_every_steps=10, data=DataConfig(vocab_size=args.vocab_size), device="cpu",
        threads=args.threads, allow_repeat=True, **changes)
    t0 = time.perf_counter()
    result = train(config)
    wall = time.perf_counter() - t0
    return wall / result.steps, result.train_seconds / result.steps


def compare(args: argparse.Namespace, name: str, base: dict, other: dict) -> dict:
    """Median step times of ``base`` and ``other`` over ``args.repeats`` interleaved pairs."""
    runs: dict[str, list[tuple[float, float]]] = {"base": [], "other": []}
    _run(args, **base)  # warm-up: allocator, caches, the token store's pages
    for _ in range(args.repeats):
        runs["base"].append(_run(args, **base))
        runs["other"].append(_run(args, **other))
    med = {k: (statistics.median(w for w, _ in v), statistics.median(t for _, t in v)) for k, v in runs.items()}
    return {
        "case": name, "base": base, "other": other,
        "wall_ms_per_step": [round(1e3 * med["base"][0], 2), round(1e3 * med["other"][0], 2)],
        "train_ms_per_step": [round(1e3 * med["base"][1], 2), round(1e3 * med["other"][1], 2)],
        "overhead_wall_pct": round(100 * (med["other"][0] / med["base"][0] - 1), 2),
        "overhead_train_pct": round(100 * (med["other"][1] / med["base"][1] - 1), 2),
        "all_wall_ms": {k: [round(1e3 * w, 2) for w, _ in v] for k, v in runs.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-0.8M")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--micro", type=int, default=4, help="micro_batch_size of case 1")
    parser.add_argument("--split", type=int, default=8, help="gns_micro_batch_size of case 2")
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import os

    import torch

    print(json.dumps({"model": args.model, "batch_size": args.batch_size, "context": args.context,
                      "steps": args.steps, "repeats": args.repeats, "threads": args.threads,
                      "torch": torch.__version__, "cpus": os.cpu_count(), "load_avg": os.getloadavg()}))
    for name, base, other in (
        ("probe on an accumulating step", dict(micro_batch_size=args.micro, measure_gns=False),
         dict(micro_batch_size=args.micro)),
        ("opt-in split of a one-pass batch", dict(), dict(gns_micro_batch_size=args.split)),
    ):
        print(json.dumps(compare(args, name, base, other)), flush=True)
    print(json.dumps({"load_avg_after": os.getloadavg()}))


if __name__ == "__main__":
    main()

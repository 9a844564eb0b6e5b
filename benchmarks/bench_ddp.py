"""Two gloo ranks against one process on the same CPU cores: tokens/s of the same trial.

The same trial (tiny preset, the built-in corpus, the same global batch) runs once in one process
with every core and once as two DDP ranks (``devices=2``) with half of the cores each, so both
use the same cores. On a CPU the ranks add an all-reduce of every gradient per step and split
each matmul in two smaller ones: the figure says what DDP costs where it buys no extra device,
not how it scales on GPUs (``benchmarks/gpu_check.sh`` measures that where two GPUs are visible).

    python benchmarks/bench_ddp.py [--model tiny-0.8M] [--batch-size 32] [--context 128] [--steps 40] [--repeats 2]

Prints one JSON object: per run the tokens/s (the trainer's own figure: evaluation and the first
step off the clock), and the ratio two-ranks / one-process (the median over repeats).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def run(model: str, batch: int, context: int, steps: int, devices: int, cores: int) -> dict:
    from cbscore.data import DataConfig
    from cbscore.train.config import TrainConfig
    from cbscore.train.trainer import train

    config = TrainConfig(
        model=model, batch_size=batch, context_tokens=context, max_tokens=batch * context * steps, lr=1e-3,
        ewa_taus=(0.999,), eval_windows=1, eval_every_steps=10**9, log_every_steps=10, data=DataConfig(),
        device="cpu", threads=max(1, cores // devices), devices=devices, allow_repeat=True,
    )
    t0 = time.perf_counter()
    result = train(config)
    return {"devices": devices, "threads_per_rank": config.threads, "tokens_per_s": result.tokens_per_s,
            "wall_s": round(time.perf_counter() - t0, 1), "final_train_loss": result.train_log[-1][1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny-0.8M")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="cores both runs share")
    args = parser.parse_args()

    from cbscore.data import DataConfig, prepare

    prepare(DataConfig())
    runs = []
    for _ in range(args.repeats):  # interleaved, so a change in the machine's load hits both alike
        for devices in (1, 2):
            runs.append(run(args.model, args.batch_size, args.context, args.steps, devices, args.cores))
    one = statistics.median(r["tokens_per_s"] for r in runs if r["devices"] == 1)
    two = statistics.median(r["tokens_per_s"] for r in runs if r["devices"] == 2)
    print(json.dumps({"model": args.model, "batch_size": args.batch_size, "context": args.context,
                      "steps": args.steps, "cores": args.cores, "load_average": os.getloadavg(),
                      "runs": runs, "median_tokens_per_s_one_process": one, "median_tokens_per_s_two_ranks": two,
                      "two_ranks_over_one": two / one}, indent=2))


if __name__ == "__main__":
    main()

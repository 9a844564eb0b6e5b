"""Cost of measuring the gradient noise scale (issue 14): step time with and without it, on CPU.

Three measurements. The first alternates single steps with and without the probe in one process
(the trainer's own ``StepFn``, the probe's host sync every 10 steps included), so that a shared
machine's load hits both sides alike step by step; it is the figure to read on a busy machine. The
other two run whole trials (``cbscore.train.trainer.train``), A/B interleaved and repeated:

0. **The probe, step by step** (``--interleaved-steps``, 0 to skip): median step time.

1. **The probe on a step that already accumulates** (``micro_batch_size`` splits the batch):
   ``measure_gns`` on against off, the same passes. This is the issue's "< 3% of step time":
   per micro-batch, one subtraction, one norm and one copy over the gradients, plus one host sync
   per log step (:class:`cbscore.train.gns.GnsProbe`).
2. **The opt-in split** of a batch that would run in one pass (``gns_micro_batch_size``): what a
   study pays for ``gns_micro_batch_size`` on small CPU batches (smaller matmuls, more passes), the
   probe included.

Step time is wall time of the whole run divided by its steps (evaluation only at step 0 and at
the end, of one window; the host sync at log steps counts, unlike in ``tokens_per_s``), and the
trainer's own ``train_seconds`` per step beside it.

    python benchmarks/bench_gns.py                      # tiny-0.8M, T 128, B 16: micro 4 and split 8

Measured on two quiet CPU cores (torch 2.13 CPU, nothing else running), ``--threads 2
--interleaved-steps 100 --steps 100 --repeats 5``: 0. median step 215.9 ms without the probe,
216.4 ms with it (+0.24%); 1. whole trials 186.6 → 191.3 ms per step (+2.5%); 2. the opt-in split
at 8 of a batch of 16, 172.6 → 181.3 ms (+5.1%, smaller matmuls). The first probe, which copied
``.grad`` and took differences, measured +3.1% and +4.0% in 0. and 1. on the same machine. On a busy
machine use ``--threads 1`` (with two threads under load 8–9 the OpenMP threads starved).

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
    from cbscore.train.config import TrainConfig
    from cbscore.train.trainer import train

    config = TrainConfig(
        model=args.model, batch_size=args.batch_size, context_tokens=args.context,
        max_tokens=args.batch_size * args.context * args.steps, lr=1e-3, ewa_taus=(0.999,), eval_windows=1,
        eval_every_steps=10**9, log_every_steps=10, data=DataConfig(vocab_size=args.vocab_size), device="cpu",
        threads=args.threads, allow_repeat=True, **changes)
    t0 = time.perf_counter()
    result = train(config)
    wall = time.perf_counter() - t0
    return wall / result.steps, result.train_seconds / result.steps


def interleaved(args: argparse.Namespace) -> dict:
    """Median step time of the trainer's step with and without a ``GnsProbe``, alternating steps."""
    import contextlib

    import torch

    from cbscore.data import DataConfig, prepare
    from cbscore.model.config import get_preset
    from cbscore.model.gpt import GPT
    from cbscore.train.averaging import WeightAverage
    from cbscore.train.gns import GnsProbe
    from cbscore.train.step import StepFn

    torch.set_num_threads(args.threads)
    store = prepare(DataConfig(vocab_size=args.vocab_size))
    stream = store.train_stream(args.context, 0, allow_repeat=True)
    torch.manual_seed(0)
    model = GPT(get_preset(args.model).config(vocab_size=int(store.vocab_size), context_tokens=args.context))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.95, 0.99))
    average = WeightAverage(list(model.parameters()), (0.999,))
    probe = GnsProbe(model.parameters(), n_micro=args.batch_size // args.micro, micro_batch_size=args.micro,
                     batch_tokens=args.batch_size * args.context, half_life_tokens=1e6)
    common = dict(device=torch.device("cpu"), micro_batch_size=args.micro, batch_size=args.batch_size,
                  autocast=contextlib.nullcontext, grad_clip=1.0)
    probe.close()  # its hooks are on the parameters only for the "on" steps
    step = {"off": StepFn(model, optimizer, average, **common),
            "on": StepFn(model, optimizer, average, gns=probe, **common)}
    times: dict[str, list[float]] = {"off": [], "on": []}
    warm = 4
    for i in range(warm + 2 * args.interleaved_steps):
        name = "on" if i % 2 else "off"
        batch = stream.batch(i, args.batch_size)
        if name == "on":
            probe.open()  # untimed: a trial puts the hooks on once
        t0 = time.perf_counter()
        step[name](batch, 1e-3)
        if name == "on" and (i // 2) % 10 == 9:
            probe.sync()  # the trainer's log-step host sync, every 10 steps
        dt = time.perf_counter() - t0
        probe.close()
        if i >= warm:
            times[name].append(dt)
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    return {"case": "probe, alternating steps in one process", "micro_batch_size": args.micro,
            "steps_each": len(times["on"]), "median_ms_per_step": [round(1e3 * off, 2), round(1e3 * on, 2)],
            "overhead_pct": round(100 * (on / off - 1), 2),
            "mean_ms_per_step": [round(1e3 * statistics.fmean(times["off"]), 2),
                                 round(1e3 * statistics.fmean(times["on"]), 2)],
            "gns_b_simple_at_end": probe.metrics()["gns_b_simple"]}


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
    parser.add_argument("--interleaved-steps", type=int, default=40, help="steps each side of measurement 0")
    parser.add_argument("--interleaved-only", action="store_true", help="only measurement 0")
    args = parser.parse_args()
    import os

    import torch

    print(json.dumps({"model": args.model, "batch_size": args.batch_size, "context": args.context,
                      "steps": args.steps, "repeats": args.repeats, "threads": args.threads,
                      "torch": torch.__version__, "cpus": os.cpu_count(), "load_avg": os.getloadavg()}))
    if args.interleaved_steps:
        print(json.dumps(interleaved(args)), flush=True)
    if args.interleaved_only:
        print(json.dumps({"load_avg_after": os.getloadavg()}))
        return
    for name, base, other in (
        ("probe on an accumulating step", dict(micro_batch_size=args.micro, measure_gns=False),
         dict(micro_batch_size=args.micro)),
        ("opt-in split of a one-pass batch", dict(), dict(gns_micro_batch_size=args.split)),
    ):
        print(json.dumps(compare(args, name, base, other)), flush=True)
    print(json.dumps({"load_avg_after": os.getloadavg()}))


if __name__ == "__main__":
    main()

"""Why one study's target can differ between hosts: train the `demo` grid's reference cell of tiny-0.1M
at D = 50k (B = 2, its three rates, each trial's config as the planner makes it) in full, and print the
target the lab reads off it (``cbscore.analysis.reference_target``: the best rate's held-out loss at D).

Run it under different CPU settings and compare the printed targets, e.g.::

    python benchmarks/target_by_isa.py --threads 1
    python benchmarks/target_by_isa.py --threads 2
    ATEN_CPU_CAPABILITY=avx2 python benchmarks/target_by_isa.py --threads 1
    MKL_ENABLE_INSTRUCTIONS=AVX2 python benchmarks/target_by_isa.py --threads 1

Torch picks its CPU kernels by instruction set (``ATEN_CPU_CAPABILITY``; MKL's matrix products by
``MKL_ENABLE_INSTRUCTIONS``), and the order of a reduction depends on the threads, so float rounding,
and through a few hundred optimizer steps the losses, differ in their last digits. What it measured
(docs/results/cheaper-search/side-by-side/README.md): one thread and this host's AVX-512 kernels give a
committed study's target to the last bit; other settings move it by up to 2.2e-4 nats. About 2 min on
two cores (three trials of 293 steps).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's packages

SPEC = ROOT / "docs" / "results" / "cheaper-search" / "spec-default.yaml"
SETTING = "tiny-0.1M_D50K"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads per trial (1: what `cbs worker --concurrency 2` gives each trial)")
    args = parser.parse_args(argv)
    import torch

    from cbscore.analysis import EvalHistory, reference_target
    from cbscore.study import plan
    from cbscore.study.spec import StudySpec
    from cbscore.train.config import TrainConfig
    from cbscore.train.trainer import train

    spec = StudySpec.from_yaml(SPEC)
    trials = sorted((t for t in plan(spec, [], 0.0).start if t.setting_id == SETTING and t.batch_size == spec.b_ref),
                    key=lambda t: t.lr)
    histories = []
    for t in trials:
        result = train(TrainConfig.from_dict({**t.train_config, "threads": args.threads}))
        evals = result.eval_history  # EvalPoints: step, loss (the best τ's), as the worker records them
        histories.append(EvalHistory(batch_size=t.batch_size, steps=tuple(float(e.step) for e in evals),
                                     losses=tuple(e.loss for e in evals), lr=t.lr, seed=t.seed,
                                     outcome="finished", role="reference"))
        print(f"{t.trial_id}: final held-out loss {result.final_eval_loss!r}", flush=True)
    setting = next(s for s in spec.resolve_settings() if s.setting_id == SETTING)
    ref_steps = setting.tokens / (spec.b_ref * spec.context_tokens)
    target = reference_target(histories, ref_steps).value
    env = {k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS") if k in os.environ}
    print(f"target {target!r} (torch CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"threads {args.threads}, {env or 'no kernel override'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

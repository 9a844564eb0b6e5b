"""Time of ``cbs study simulate`` on each paper preset with 50 seeds at σ = 0.1, in this process
and as the CLI a user runs (a fresh process, imports included). Issue 40's goal: paper-chinchilla
under 5 s in-process on two quiet cores.

Run: ``.venv/bin/python benchmarks/bench_simulate.py``. Prints one line per preset: seconds for the
50 simulated studies, in this process (wall, and this process's CPU time beside it: on a shared
machine the CPU time moves less than the wall) and as the CLI, and the tokens the study spends
against the fixed-budget grid and the full grid run to target. The checkout the script sits in is
the one timed (its root goes first on ``sys.path`` and on the CLI's ``PYTHONPATH``), so two
checkouts can be timed against each other from one virtual environment.

What it measured, and on which commit and machine: docs/status.md ("Simulator"). Where the time
goes (a sampling profile at fc5a752, paper-chinchilla): the planner about half (each cell's plan
20%, restops 6%), starting simulated trials 14% (a third of it seeding each trial's noise), each
setting's analysis 13%, the equal-token wake check 6%. On shared cores compare CPU time and call
counts, not the wall clock: ``python -m cProfile`` of ``simulate`` gives 6.5 M calls for 20
paper-chinchilla studies at fc5a752 (8.4 M at 0e5184b).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # this checkout's packages, not whichever one the environment installed

from cbscore.study import load_preset  # noqa: E402
from cbscore.study.simulate import SimConfig, paper_truth, simulate  # noqa: E402

SEEDS = 50


def main() -> int:
    for preset in ("paper-chinchilla", "paper-fixed-d", "paper-fixed-n"):
        spec = load_preset(preset)
        t0, c0 = time.perf_counter(), time.process_time()
        report = simulate(spec, paper_truth(spec), SimConfig(noise_sigma=0.1), seeds=SEEDS)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        d = report.to_json_dict()
        t1 = time.perf_counter()
        subprocess.run([os.path.join(os.path.dirname(sys.executable), "cbs"), "study", "simulate", preset, "--truth", "paper",
                        "--noise", "0.1", "--seeds", str(SEEDS)], check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))})
        cli = time.perf_counter() - t1
        print(f"{preset:<17} {SEEDS} seeds: {seconds:5.2f} s in-process (CPU {cpu:5.2f} s), {cli:5.2f} s as "
              f"`cbs study simulate`; "
              f"study tokens {d['tokens_share_of_fixed_budget_grid']:.1%} of the fixed-budget grid, "
              f"{d['tokens_study_mean'] / d['tokens_grid_to_target_mean']:.1%} of the full grid run to target")
    return 0


if __name__ == "__main__":
    sys.exit(main())

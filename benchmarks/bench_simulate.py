"""Time of ``cbs study simulate`` on each paper preset with 50 seeds at σ = 0.1 (issue 10's
budget: under 10 s), in this process and as the CLI a user runs (a fresh process, imports
included).

Run: ``.venv/bin/python benchmarks/bench_simulate.py``. Prints one line per preset: seconds for
the 50 simulated studies, in this process and as the CLI, and the tokens the study spends against
the fixed-budget grid and the full grid run to target.

Measured 2026-12-01 on two quiet cores (issue 19's planner and estimator, cells memoised):
18.2 / 12.9 / 15.3 s in-process (chinchilla / fixed-d / fixed-n), about 0.3 s per simulated study,
over the 10 s goal; before the memo 33.4 / 36.7 / 35.6 s. With ``stop_far_rates`` on by default
(stop 34): 53.8 / 42.7 / 45.9 s. Since stop 35 (the planner keeps what it read off unchanged
cells, settings and targets; the simulator skips the equal-token wakes at which no trial trails
by the margin; every plan unchanged): 18.5 / 17.1 / 20.2 s in-process, 17.9 / 18.8 / 19.4 s as
the CLI, 2026-12-04 on two quiet cores, still over the 10 s goal.

Issue 40 asks for under 5 s (paper-chinchilla) with the planner as small parts and no memo beside
it: a ``Planner`` per simulated study reads only the records that changed (the simulator says which),
re-plans only the cells whose records or inputs changed, and only a cell's stop rules where only its
running trials evaluated again; every plan is byte-identical to 7159cfb's. Measured 2026-12-05 on two
cores shared with other helpers' work (load average 3–7, so wall times are loose): this script at
7159cfb 33.1 / 31.4 / 28.4 s in-process (32.5 / 25.7 / 21.1 s as the CLI; load 3.2–5.2), at 7973051
9.7 / 10.4 / 10.0 s (10.5 / 11.1 / 11.2 s; load 3.7–5.2). Interleaved on the same cores, paper-chinchilla
in-process, four runs each (load 5.8–7.7): 13.6–14.1 s of CPU at 7159cfb, 9.2–9.6 s at 7973051
(wall 18.1–26.5 s and 11.7–18.8 s). Still over 5 s: of what is left (cProfile and timers, 20 seeds),
the planner is about half (a tenth of all of it building and checking each trial's ``TrainConfig``),
starting simulated trials (their noise draws and curves, ``sim_trials``) 16%, each setting's
analysis (``sim_outcomes``) 12%, the records of running trials 6%, the wakes' equal-token check 5%.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from cbscore.study import load_preset  # noqa: E402
from cbscore.study.simulate import SimConfig, paper_truth, simulate  # noqa: E402

SEEDS = 50


def main() -> int:
    for preset in ("paper-chinchilla", "paper-fixed-d", "paper-fixed-n"):
        spec = load_preset(preset)
        t0 = time.perf_counter()
        report = simulate(spec, paper_truth(spec), SimConfig(noise_sigma=0.1), seeds=SEEDS)
        seconds = time.perf_counter() - t0
        d = report.to_json_dict()
        t1 = time.perf_counter()
        subprocess.run([os.path.join(os.path.dirname(sys.executable), "cbs"), "study", "simulate", preset, "--truth", "paper",
                        "--noise", "0.1", "--seeds", str(SEEDS)], check=True, capture_output=True)
        cli = time.perf_counter() - t1
        print(f"{preset:<17} {SEEDS} seeds: {seconds:5.2f} s in-process, {cli:5.2f} s as `cbs study simulate`; "
              f"study tokens {d['tokens_share_of_fixed_budget_grid']:.1%} of the fixed-budget grid, "
              f"{d['tokens_study_mean'] / d['tokens_grid_to_target_mean']:.1%} of the full grid run to target")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time of ``cbs study simulate`` on each paper preset with 50 seeds at σ = 0.1 (issue 10's
budget: under 10 s), in this process and as the CLI a user runs (a fresh process, imports
included).

Run: ``.venv/bin/python benchmarks/bench_simulate.py``. Prints one line per preset: seconds for
the 50 simulated studies, in this process (wall, and this process's CPU time beside it: on a shared
machine the CPU time moves less than the wall) and as the CLI, and the tokens the study spends
against the fixed-budget grid and the full grid run to target.

Measured 2026-12-01 on two quiet cores (issue 19's planner and estimator, cells memoised):
18.2 / 12.9 / 15.3 s in-process (chinchilla / fixed-d / fixed-n), about 0.3 s per simulated study,
over the 10 s goal; before the memo 33.4 / 36.7 / 35.6 s. With ``stop_far_rates`` on by default
(stop 34): 53.8 / 42.7 / 45.9 s. Since stop 35 (the planner keeps what it read off unchanged
cells, settings and targets; the simulator skips the equal-token wakes at which no trial trails
by the margin; every plan unchanged): 18.5 / 17.1 / 20.2 s in-process, 17.9 / 18.8 / 19.4 s as
the CLI, 2026-12-04 on two quiet cores, still over the 10 s goal.

Issue 40 asks for under 5 s (paper-chinchilla) with the planner as small parts and no memo beside
it: a ``Planner`` per simulated study reads only the records that changed (the simulator says which),
re-plans only the cells whose records or inputs changed, and only a cell's status counts and stop
rules where only its unended trials moved; every plan is byte-identical to 7159cfb's. Measured
2026-12-05 on two cores shared with other helpers' work (so wall times are loose), this script
run back to back: at 7159cfb 13.8 / 14.3 / 13.8 s in-process (14.8 / 15.2 / 15.3 s as the CLI), at
aec77e2 9.3 / 9.0 / 8.9 s (10.3 / 9.6 / 10.1 s), load average 2.6–3.0. Interleaved paper-chinchilla
runs in-process, three each (load 3.2–3.6): 13.2–13.6 s of CPU at 7159cfb, 8.5–8.6 s at 9c33cf8
(wall 13.7–14.4 s and 8.7–9.3 s). Still over 5 s: of 9.2 s (50 seeds, timers around each part) the
planner takes 4.7 s (0.9 s of it building and checking each trial's ``TrainConfig``; the rest about
0.19 ms a call over ~400 calls a study), starting simulated trials (noise draws and curves,
``sim_trials``) 1.5 s, each setting's analysis (``sim_outcomes``) 1.1 s, the running trials'
records 0.6 s, the wakes' equal-token check 0.6 s: the parts outside the planner alone take about 4.6 s.

Issue 40, 2026-12-05, 9a936e6 -> fdeb364 (every simulated study byte-identical: the JSON, the per-seed
outcomes and the table of paper-chinchilla, -fixed-d, -fixed-n, a chained search, lab noise with
evaluation noise, far rates off, prune at equal tokens, predict): the simulator's planner builds no
trainer config per trial (each cell's is checked once per simulation), running trials' records are
copied from their first, cells re-key only the records that changed and look for new crossings only
in them, stop rules read the best's neighbours only where a trial is past its margin or fraction, a
cell orders its rates only where a trial is missing, restop copies plans without
``dataclasses.replace``, wakes are queued once and the prune margin's worked out only when the
running trials or bests move, the wake check reads evaluations in place, and the minimum's B* is read
off the same measured points. paper-chinchilla in-process, the two trees alternating three times each
on two cores shared with a CPU study and other helpers (load average 3.3-5.3): CPU time 6.21 / 6.13 /
6.27 s at 9a936e6 against 5.30 / 5.14 / 5.12 s (0.84x; 0.81x with the last commit, 6.70 / 6.84 / 6.66
against 5.42 / 5.51 / 5.43). Of what is left (a sampling profile): the planner about 48% (each cell's
plan 18%, restops 7%), each setting's analysis 15%, starting simulated trials 15% (a seeded generator
per noise draw 5%), the event loop and its wake check about 15%.

Issue 40, 2026-12-05, ccfa190 -> 8d9b24b (every simulated study byte-identical, the same 8
configurations): one curve's least squares on Python floats (fit_log_linear, the same doubles), a
running trial's equal-token wake worked out again only where its best or its last fourth evaluation
moved, no module-wide crossings memo (a Planner owns its study's, crossings.Crossings: each record
read once per target), and a setting's pass skips the cells that did not move under the same chain
state. paper-chinchilla in-process, the two trees alternating three times on two shared cores (load
average 2.6-3.0): CPU time 5.00 / 5.03 / 5.02 s at ccfa190 against 4.71 / 4.66 / 4.67 s (0.93x; wall
5.24 / 5.18 / 5.24 s against 5.01 / 4.75 / 4.83 s); callgrind on 4 studies 3,067M -> 2,825M
instructions. Still short of 5 s on quiet cores by the earlier helper's ratio (about 5.5-5.8 s). What
is left is flat: the planner (each cell's plan, restops, per-call reads), numpy on tiny arrays when a
simulated trial starts (its reading and curve) and in each setting's analysis, a seeded generator per
noise draw (~4.5%: numpy's default_rng, which must stay for the same draws), the far-rate wake check.
A record built by ``object.__new__`` and a ``__dict__`` update reads slower afterwards than one from
the constructor (its dict is not the class's shared-key one): for an ended trial's record, read often,
the copy cost more than it saved.
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
        t0, c0 = time.perf_counter(), time.process_time()
        report = simulate(spec, paper_truth(spec), SimConfig(noise_sigma=0.1), seeds=SEEDS)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        d = report.to_json_dict()
        t1 = time.perf_counter()
        subprocess.run([os.path.join(os.path.dirname(sys.executable), "cbs"), "study", "simulate", preset, "--truth", "paper",
                        "--noise", "0.1", "--seeds", str(SEEDS)], check=True, capture_output=True)
        cli = time.perf_counter() - t1
        print(f"{preset:<17} {SEEDS} seeds: {seconds:5.2f} s in-process (CPU {cpu:5.2f} s), {cli:5.2f} s as "
              f"`cbs study simulate`; "
              f"study tokens {d['tokens_share_of_fixed_budget_grid']:.1%} of the fixed-budget grid, "
              f"{d['tokens_study_mean'] / d['tokens_grid_to_target_mean']:.1%} of the full grid run to target")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time of one full grid of the exact least-squares simulator (issue 26), one core.

Run: ``.venv/bin/python benchmarks/bench_theory.py [--repeats N] [--iterate last|ewa|uniform]``.
The grid is the issue's: a = 1.5, b = 2.5, σ² = 1, d = 512, B = 2^0 … 2^12 (13 batch sizes),
η = η_crit(B)·0.95·2^−j (11 step sizes), the exact risk on a geometric step grid of ratio 1.05 to
3·10^6 steps, then Definition 1 at 7 data sizes. The goal is about a second for the last iterate.
Prints the median and the worst of the repeats for (a) the simulation (``simulate``: the spectral
solution of every configuration and its risk on the step grid) and (b) simulation plus analysis
(``run_theory``), and the process's CPU time beside the wall time (a loaded machine shows a gap).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one core, as the goal says

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from cbscore.theory import Grid, Problem, analyze, simulate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterate", choices=("last", "ewa", "uniform"), default="last")
    args = parser.parse_args()
    problem = Problem(a=1.5, b=2.5, sigma2=1.0, d=512)
    grid = Grid(iterate=args.iterate)
    n_config = len(grid.batch_sizes) * len(grid.eta_fractions) * (len(grid.taus) if args.iterate == "ewa" else 1)
    sim, full, cpu = [], [], []
    for _ in range(args.repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        run = simulate(problem, grid)
        t1 = time.perf_counter()
        result = analyze(run, b_ref=4)
        t2, c2 = time.perf_counter(), time.process_time()
        sim.append(t1 - t0)
        full.append(t2 - t0)
        cpu.append(c2 - c0)
    at_1e4 = [s for s in result.settings if s.d_samples == 10_000][0]
    print(f"grid: {len(grid.batch_sizes)} batch sizes × {len(grid.eta_fractions)} step sizes"
          f"{f' × {len(grid.taus)} τ' if args.iterate == 'ewa' else ''} = {n_config} curves, d = {problem.d}, "
          f"{run.steps.size} grid steps to {grid.max_steps:,}, {args.iterate} iterate, {args.repeats} repeats")
    print(f"simulate:            median {statistics.median(sim):.3f} s, worst {max(sim):.3f} s")
    print(f"simulate + analyze:  median {statistics.median(full):.3f} s, worst {max(full):.3f} s "
          f"(CPU median {statistics.median(cpu):.3f} s)")
    print(f"at D = 10^4: B* (points) {at_1e4.cbs_empirical:.1f}, B_noise {at_1e4.b_noise:.1f}, "
          f"B* (fit) {at_1e4.cbs:.1f}")


if __name__ == "__main__":
    main()

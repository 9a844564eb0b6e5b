"""Time of the CBS fit plus a 1,000-resample bootstrap: 5 settings × 9 batch sizes, one core.

Run: ``.venv/bin/python benchmarks/bench_fit.py``. The issue's budget is under one second for
the fit plus bootstrap; this prints the median of several repeats for (a) ``fit_steps`` +
``bootstrap_steps_fit`` alone, (b) the whole ``analyze_table`` (adds the empirical B*, the
sensitivity tables and the scaling laws with their 1,000 draws), and (c) the first call in a
fresh process (imports included).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one core, as the budget says

import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

T0 = time.perf_counter()
import numpy as np  # noqa: E402

from cbscore.analysis import (  # noqa: E402
    TrialSteps,
    analyze_table,
    bootstrap_steps_fit,
    fit_steps,
    measure_points,
)

BATCH_SIZES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
N = (85e6, 151e6, 302e6, 604e6, 1.2e9)
D = (1.741e9, 3.072e9, 6.144e9, 12.288e9, 24.576e9)


def make_rows(trials: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for i, (n, d) in enumerate(zip(N, D)):
        s_min, b_noise = 1500.0 * (d / D[0]) ** 0.3, 1000.0 * (d / D[0]) ** 0.5
        for b in BATCH_SIZES:
            for _ in range(trials):
                z = rng.standard_normal()
                steps = s_min * (1 + b_noise / b) * np.exp(0.05 * (abs(z) if trials > 1 else z))
                rows.append({"setting": f"s{i}", "batch_size": b, "steps": steps, "n_params": n, "tokens": d})
    return rows


def fit_and_bootstrap(rows: list[dict]) -> None:
    by_setting: dict[str, list[TrialSteps]] = {}
    for row in rows:
        by_setting.setdefault(row["setting"], []).append(
            TrialSteps(batch_size=row["batch_size"], steps=row["steps"])
        )
    for trials in by_setting.values():
        points = measure_points(trials)
        fit = fit_steps([p.batch_size for p in points], [p.steps for p in points])
        bootstrap_steps_fit(points, fit, n_resamples=1000, seed=0)


def median_seconds(fn, repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    rows_1 = make_rows(trials=1)
    first = time.perf_counter()
    analyze_table(rows_1, bootstrap=1000)
    cold = time.perf_counter() - T0
    first_call = time.perf_counter() - first
    print(f"5 settings × 9 batch sizes, 1,000 resamples each, 1 thread (python {sys.version.split()[0]}, numpy {np.__version__})")
    print(f"  cold process (imports + first analyze_table): {cold:.3f} s  (first call alone {first_call:.3f} s)")
    for trials in (1, 5):
        rows = make_rows(trials)
        fb = median_seconds(lambda: fit_and_bootstrap(rows))
        table = median_seconds(lambda: analyze_table(rows, bootstrap=1000))
        label = "1 trial per B (residual bootstrap)" if trials == 1 else "5 trials per B (trial bootstrap)"
        print(f"  {label}: fit + bootstrap {fb * 1000:.0f} ms; whole analyze_table {table * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

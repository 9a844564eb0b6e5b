"""Synthetic steps tables with known answers, shared by the analysis tests."""

from __future__ import annotations

import numpy as np

#: The paper's batch sizes (sequences), DESIGN.md §1.
PAPER_BATCH_SIZES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def curve(batch_sizes, s_min: float, b_noise: float) -> np.ndarray:
    """Noise-free ``S(B) = S_min·(1 + B_noise/B)``."""
    return s_min * (1.0 + b_noise / np.asarray(batch_sizes, dtype=float))


def noisy_curve(batch_sizes, s_min: float, b_noise: float, sigma: float, rng) -> np.ndarray:
    """``S(B)`` times ``exp(sigma·z)``: multiplicative noise, as the log fit assumes."""
    clean = curve(batch_sizes, s_min, b_noise)
    return clean * np.exp(sigma * rng.standard_normal(len(clean)))


def table_rows(settings, batch_sizes=PAPER_BATCH_SIZES, sigma=0.0, seed=0, trials=1):
    """Rows of a steps table: ``settings`` is a list of dicts with ``setting``, ``s_min``,
    ``b_noise`` and optionally ``n_params``/``tokens``. With several trials per batch size, each
    trial is the clean curve times ``exp(sigma·|z|)`` (a worse hyper-parameter is slower)."""
    rng = np.random.default_rng(seed)
    rows = []
    for spec in settings:
        clean = curve(batch_sizes, spec["s_min"], spec["b_noise"])
        for b, s in zip(batch_sizes, clean):
            for _ in range(trials):
                z = rng.standard_normal()
                factor = np.exp(sigma * (abs(z) if trials > 1 else z))
                row = {"setting": spec["setting"], "batch_size": b, "steps": float(s * factor)}
                for key in ("n_params", "tokens"):
                    if key in spec:
                        row[key] = spec[key]
                rows.append(row)
    return rows

"""Percentile intervals of bootstrap samples that may hold +inf (an unresolved quantity)."""

from __future__ import annotations

import math

import numpy as np

#: Two-sided level of every interval in this package.
LEVEL = 0.95


def percentile_interval(samples: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The central ``level`` percentile interval of ``samples`` (linear interpolation).

    NaN samples are dropped. ``+inf`` samples (e.g. ``B_noise`` when a resample's ``S_min`` fit
    reaches 0) sort last, so an end of the interval is ``inf`` exactly when the percentile falls
    among them. Returns ``(nan, nan)`` for no finite-or-infinite sample at all.
    """
    values = np.sort(np.asarray(samples, dtype=float).ravel())
    values = values[~np.isnan(values)]
    if values.size == 0:
        return (math.nan, math.nan)
    tail = (1.0 - level) / 2.0
    return (_quantile(values, tail), _quantile(values, 1.0 - tail))


def _quantile(sorted_values: np.ndarray, q: float) -> float:
    position = q * (sorted_values.size - 1)
    lo = int(math.floor(position))
    hi = min(lo + 1, sorted_values.size - 1)
    frac = position - lo
    v_lo, v_hi = float(sorted_values[lo]), float(sorted_values[hi])
    if frac == 0.0 or v_lo == v_hi:
        return v_lo
    if math.isinf(v_lo) or math.isinf(v_hi):
        return v_hi if frac > 0 else v_lo
    return v_lo + frac * (v_hi - v_lo)

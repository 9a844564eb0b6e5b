"""Percentile intervals of bootstrap samples that may hold +inf (an unresolved quantity)."""

from __future__ import annotations

import functools
import math

import numpy as np

#: Two-sided level of every interval in this package.
LEVEL = 0.95


def percentile_interval(
    samples: np.ndarray, level: float = LEVEL, dof: int | None = None
) -> tuple[float, float]:
    """The central ``level`` percentile interval of ``samples`` (linear interpolation).

    With ``dof`` (the residual degrees of freedom of the fit behind the samples) the interval is
    the *expanded percentile* interval (Hesterberg 2015, "What teachers should know about the
    bootstrap", §4.4): tails ``Φ(-t_{dof}(1 - (1 - level)/2))`` instead of ``(1 - level)/2``,
    which undoes the narrowness of a percentile interval from few points (with 9 batch sizes,
    coverage of a 95% interval goes from ~89% to ~94% on synthetic curves).

    NaN samples are dropped. ``+inf`` samples (e.g. ``B_noise`` when a resample's ``S_min`` fit
    reaches 0) sort last, so an end of the interval is ``inf`` exactly when the percentile falls
    among them. Returns ``(nan, nan)`` for no finite-or-infinite sample at all.
    """
    values = np.sort(np.asarray(samples, dtype=float).ravel())
    values = values[~np.isnan(values)]
    if values.size == 0:
        return (math.nan, math.nan)
    tail = expanded_tail(level, dof)
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


@functools.lru_cache(maxsize=64)
def expanded_tail(level: float = LEVEL, dof: int | None = None) -> float:
    """Probability in each tail of a ``level`` interval, expanded for ``dof`` degrees of freedom:
    ``Φ(-t)`` with ``t`` the Student-t quantile ``t_dof(1 - (1 - level)/2)``."""
    tail = (1.0 - level) / 2.0
    if dof is None:
        return tail
    if dof < 1:
        return 0.0  # no residual degrees of freedom: the whole range of the samples
    t = student_t_quantile(1.0 - tail, int(dof))
    return 0.5 * math.erfc(t / math.sqrt(2.0))


def student_t_quantile(p: float, dof: int) -> float:
    """Quantile of Student's t with integer ``dof`` (``p`` in (0.5, 1)), by bisection on the
    closed-form CDF of Abramowitz & Stegun 26.7.3-26.7.4 (no scipy import on this path)."""
    target = 2.0 * p - 1.0  # P(|T| <= t)
    lo, hi = 0.0, 1.0
    while _t_central(hi, dof) < target:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _t_central(mid, dof) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return 0.5 * (lo + hi)


def _t_central(t: float, dof: int) -> float:
    """``P(|T| <= t)`` for Student's t with integer ``dof`` (A&S 26.7.3 odd, 26.7.4 even)."""
    theta = math.atan(t / math.sqrt(dof))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if dof % 2 == 1:
        total, term = 0.0, 1.0
        if dof > 1:
            term = math.cos(theta)
            total = term
            for k in range(3, dof - 1, 2):  # cos^k theta · (2·4···(k-1))/(1·3···k)
                term *= c2 * (k - 1) / k
                total += term
        return (2.0 / math.pi) * (theta + s * total) if dof > 1 else 2.0 * theta / math.pi
    total, term = 1.0, 1.0
    for k in range(2, dof - 1, 2):  # cos^k theta · (1·3···(k-1))/(2·4···k)
        term *= c2 * (k - 1) / k
        total += term
    return s * total

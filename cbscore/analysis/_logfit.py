"""Batched least squares of ``log S = log(a + b·x)`` over many data sets at once.

One call fits the measured curve *and* all bootstrap resamples: a vectorised Levenberg-Marquardt
on two parameters, with the 2×2 normal equations solved in closed form, so 1,000 resamples cost
about as much as a handful of scipy ``curve_fit`` calls. Bounds ``a ≥ 0, b ≥ 0`` are kept by an
active set (a parameter at its bound whose gradient points outwards is frozen for that step).
"""

from __future__ import annotations

import numpy as np

_MAX_ITERATIONS = 200
_RTOL = 1e-13


def fit_log_linear(x: np.ndarray, log_y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimise ``sum_k (log_y[r, k] - log(a[r] + b[r]·x[k]))²`` for every row ``r``.

    Args:
        x: (K,) regressor, ``B^-alpha`` (``1/B`` for the paper's model); positive.
        log_y: (R, K) log of the measured steps; finite.

    Returns:
        ``(a, b)``, each (R,), with ``a ≥ 0`` and ``b ≥ 0``.
    """
    x = np.asarray(x, dtype=float)  # (K,)
    log_y = np.atleast_2d(np.asarray(log_y, dtype=float))  # (R, K)
    a, b = _weighted_linear_start(x, log_y)
    f = a[:, None] + b[:, None] * x  # (R, K)
    cost = np.sum((log_y - np.log(f)) ** 2, axis=1)  # (R,)
    lam = np.full(a.shape, 1e-3)
    active = np.ones(a.shape, dtype=bool)
    for _ in range(_MAX_ITERATIONS):
        if not active.any():
            break
        resid = log_y - np.log(f)  # (R, K)
        j_a = 1.0 / f  # d log f / d a, (R, K)
        j_b = x / f  # d log f / d b, (R, K)
        h_aa = np.sum(j_a * j_a, axis=1)
        h_ab = np.sum(j_a * j_b, axis=1)
        h_bb = np.sum(j_b * j_b, axis=1)
        g_a = np.sum(j_a * resid, axis=1)  # descent direction: raising a lowers cost if > 0
        g_b = np.sum(j_b * resid, axis=1)
        # Active set: a parameter at 0 that wants to go negative stays at 0 for this step.
        hold_a = (a <= 0.0) & (g_a <= 0.0)
        hold_b = (b <= 0.0) & (g_b <= 0.0)
        d_aa = h_aa * (1.0 + lam)
        d_bb = h_bb * (1.0 + lam)
        det = d_aa * d_bb - h_ab * h_ab
        with np.errstate(divide="ignore", invalid="ignore"):
            step_a = np.where(hold_b, g_a / d_aa, (d_bb * g_a - h_ab * g_b) / det)
            step_b = np.where(hold_a, g_b / d_bb, (d_aa * g_b - h_ab * g_a) / det)
        step_a = np.where(hold_a | ~np.isfinite(step_a), 0.0, step_a)
        step_b = np.where(hold_b | ~np.isfinite(step_b), 0.0, step_b)
        a_new = np.maximum(a + step_a, 0.0)
        b_new = np.maximum(b + step_b, 0.0)
        f_new = a_new[:, None] + b_new[:, None] * x
        with np.errstate(divide="ignore", invalid="ignore"):
            cost_new = np.sum((log_y - np.log(f_new)) ** 2, axis=1)
        better = active & np.all(f_new > 0.0, axis=1) & (cost_new <= cost)
        a = np.where(better, a_new, a)
        b = np.where(better, b_new, b)
        f = np.where(better[:, None], f_new, f)
        # Converged: an accepted step that barely moved anything, or damping that blew up.
        moved = np.abs(step_a) > _RTOL * np.maximum(a, 1e-300)
        moved |= np.abs(step_b) > _RTOL * np.maximum(b, 1e-300)
        tiny_gain = better & (cost - cost_new <= _RTOL * np.maximum(cost, 1e-300))
        cost = np.where(better, cost_new, cost)
        lam = np.where(better, lam / 3.0, lam * 4.0)
        active &= ~((better & (~moved | tiny_gain)) | (lam > 1e12))
    return a, b


def _weighted_linear_start(x: np.ndarray, log_y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start from linear least squares of ``(y - a - b·x)/y``, which is ``≈ log y - log f``."""
    y = np.exp(log_y)  # (R, K)
    w2 = 1.0 / (y * y)
    s11 = np.sum(w2, axis=1)
    s12 = np.sum(w2 * x, axis=1)
    s22 = np.sum(w2 * x * x, axis=1)
    t1 = np.sum(w2 * y, axis=1)
    t2 = np.sum(w2 * y * x, axis=1)
    det = s11 * s22 - s12 * s12
    with np.errstate(divide="ignore", invalid="ignore"):
        a = (s22 * t1 - s12 * t2) / det
        b = (s11 * t2 - s12 * t1) / det
    a = np.where(np.isfinite(a), np.maximum(a, 0.0), 0.0)
    b = np.where(np.isfinite(b), np.maximum(b, 0.0), 0.0)
    # Both at the bound would make f = 0: start from the flat curve through the geometric mean.
    flat = (a <= 0.0) & (b <= 0.0)
    a = np.where(flat, np.exp(np.mean(log_y, axis=1)), a)
    # a = 0 with b > 0 is a valid start (pure 1/B scaling).
    return a, b

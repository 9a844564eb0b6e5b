"""Batched least squares of ``log S = log(a + b·x)`` over many data sets at once.

One call fits the measured curve *and* all bootstrap resamples: a vectorised Levenberg-Marquardt
on two parameters, with the 2×2 normal equations solved in closed form, so 1,000 resamples cost
about as much as a handful of scipy ``curve_fit`` calls. Bounds ``a ≥ 0, b ≥ 0`` are kept by an
active set (a parameter at its bound whose gradient points outwards is frozen for that step).
"""

from __future__ import annotations

import math

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
    if log_y.shape[0] == 1 and x.ndim == 1:
        return _fit_one(x, log_y[0], float(a[0]), float(b[0]))
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


def _fit_one(x: np.ndarray, log_y: np.ndarray, a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`fit_log_linear` of one row (a measured curve, no resamples: a simulated study fits
    thousands), the same arithmetic on Python floats where the rows' version holds (1,) arrays: each
    IEEE operation gives the same double, and :func:`_where_div` and :func:`_np_max` give what
    numpy's division and ``np.maximum`` give where a plain float would raise or differ (a zero
    divisor, a NaN, a signed zero). ``x`` and ``log_y``: (K,); ``a``, ``b``: the start. (Sums and
    ``all`` as the arrays' methods: the same reductions as ``np.sum``/``np.all``, without their wrappers.)"""
    f = a + b * x  # (K,)
    cost = float(((log_y - np.log(f)) ** 2).sum())
    lam = 1e-3
    for _ in range(_MAX_ITERATIONS):
        resid = log_y - np.log(f)  # (K,)
        j_a = 1.0 / f
        j_b = x / f
        h_aa = float((j_a * j_a).sum())
        h_ab = float((j_a * j_b).sum())
        h_bb = float((j_b * j_b).sum())
        g_a = float((j_a * resid).sum())
        g_b = float((j_b * resid).sum())
        hold_a = a <= 0.0 and g_a <= 0.0
        hold_b = b <= 0.0 and g_b <= 0.0
        d_aa = h_aa * (1.0 + lam)
        d_bb = h_bb * (1.0 + lam)
        det = d_aa * d_bb - h_ab * h_ab
        step_a = _where_div(g_a, d_aa) if hold_b else _where_div(d_bb * g_a - h_ab * g_b, det)
        step_b = _where_div(g_b, d_bb) if hold_a else _where_div(d_aa * g_b - h_ab * g_a, det)
        if hold_a or not math.isfinite(step_a):
            step_a = 0.0
        if hold_b or not math.isfinite(step_b):
            step_b = 0.0
        a_new = _np_max(a + step_a, 0.0)
        b_new = _np_max(b + step_b, 0.0)
        f_new = a_new + b_new * x
        with np.errstate(divide="ignore", invalid="ignore"):
            cost_new = float(((log_y - np.log(f_new)) ** 2).sum())
        better = bool((f_new > 0.0).all()) and cost_new <= cost
        if better:
            a, b, f = a_new, b_new, f_new
        moved = abs(step_a) > _RTOL * _np_max(a, 1e-300) or abs(step_b) > _RTOL * _np_max(b, 1e-300)
        tiny_gain = better and cost - cost_new <= _RTOL * _np_max(cost, 1e-300)
        if better:
            cost = cost_new
        lam = lam / 3.0 if better else lam * 4.0
        if (better and (not moved or tiny_gain)) or lam > 1e12:
            break
    return np.array([a]), np.array([b])


def _where_div(num: float, den: float) -> float:
    """``num / den`` as numpy divides two float64 (IEEE 754): ±inf, or NaN for 0/0 or a NaN, where
    the divisor is zero."""
    if den != 0.0:
        return num / den
    if num != num or num == 0.0:  # (NaN or zero over zero)
        return math.nan
    return math.copysign(math.inf, num) * math.copysign(1.0, den)


def _np_max(v: float, floor: float) -> float:
    """``np.maximum(v, floor)`` of two floats: ``v`` where it is NaN or above ``floor``, else ``floor``
    (so ``np.maximum(-0.0, 0.0)`` is ``0.0`` and a NaN propagates)."""
    return v if (v != v or v > floor) else floor


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

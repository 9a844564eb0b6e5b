"""Roots of the secular equation ``Σ_i w_i/(e_i − ν) = 1`` (eigenvalues of a diagonal-plus-rank-one matrix).

The last-iterate recursion of :mod:`cbscore.theory.recursion` is ``A ← (diag(ρ) + v·λᵀ)·A + c``;
its eigenvalues ``μ = 1 − ν`` are the roots of ``g(μ) = Σ_i λ_i v_i/(μ − ρ_i) = 1`` (the
characteristic polynomial of a rank-one update, Golub 1973, "Some modified matrix eigenvalue
problems", SIAM Rev. 15, §5; Bunch, Nielsen & Sorensen 1978, Numer. Math. 31, eq. 2.3). Written in
``ν = 1 − μ`` and ``e_i = 1 − ρ_i`` (each known to full relative precision even where ``μ`` is
within 1e-9 of 1), the roots interlace the poles: with ``e`` ascending, one root lies below ``e_0``
and one in each ``(e_{k−1}, e_k)``.

Each root is stored as an offset from its nearer pole, ``ν_k = e[origin_k] + offset_k``, so that
the differences ``e_i − ν_k`` that every residue needs are exact to rounding however close the root
is to its pole (the device of LAPACK's ``dlaed4``). The iteration is Li's "middle way" (R.-C. Li
1993, "Solving secular equations stably and efficiently", LAPACK Working Note 89, §3): the sums over
the poles below and above the root are each replaced by one pole plus a constant that match value
and slope, and the quadratic that results gives the next iterate; it converges quadratically and
falls back to bisection of a maintained bracket. Cost: ``O(d²)`` per sweep over the roots still
moving, a few sweeps in all.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

_EPS = float(np.finfo(float).eps)
#: A converging step this small (relative to the offset) is the last one needed.
_QUADRATIC_DONE = 1e-9


@dataclass(frozen=True, kw_only=True, eq=False)
class SecularRoots:
    """The ``d`` roots of ``Σ_i w_i/(e_i − ν) = 1`` with ``e`` ascending and ``w > 0``."""

    origin: np.ndarray
    """(d,) index of the pole each root is measured from."""
    offset: np.ndarray
    """(d,) ``ν_k − e[origin_k]``."""
    nu: np.ndarray
    """(d,) the roots ``ν_k = e[origin_k] + offset_k`` (``1 − μ_k``), ascending."""
    diff: np.ndarray
    """(d, d) ``e_i − ν_k`` at ``[k, i]``, exact to rounding."""
    inv_diff: np.ndarray
    """(d, d) ``1/(e_i − ν_k)``."""


def solve_secular(e: np.ndarray, w: np.ndarray, *, max_sweeps: int = 100) -> SecularRoots:
    """All roots of ``Σ_i w_i/(e_i − ν) = 1``.

    Args:
        e: (d,) distinct poles, ascending.
        w: (d,) positive weights.
    """
    e = np.asarray(e, dtype=float)
    w = np.asarray(w, dtype=float)
    d = e.size
    idx = np.arange(d)
    half = np.empty(d)  # half the width of each root's interval (root 0: the bound Σw)
    half[0] = float(w.sum())  # g(e_0 − Σw) ≤ Σw/Σw = 1 and g(e_0⁻) = +∞
    half[1:] = 0.5 * np.diff(e)
    # Pole differences P[j, i] = e_i − e_j, each exact to rounding, and the start: where the
    # origin's own term balances the others evaluated at the origin, w_j/(e_j − ν) = 1 − s_j with
    # s_j = Σ_{i≠j} w_i/(e_i − e_j) (exact for a weakly coupled mode). s_j < 1 puts pole j's root
    # below it (root j), s_j > 1 above it (root j + 1).
    P = e[None, :] - e[:, None]
    work = np.empty_like(P)
    P.flat[:: d + 1] = np.inf
    np.reciprocal(P, out=work)
    P.flat[:: d + 1] = 0.0
    s = work @ w
    guess = -w / (1.0 - s)  # offset of pole j's root from e_j
    below_ok = (guess < 0) & (-guess < half)  # root j, measured from its upper pole j
    above_ok = np.zeros(d, dtype=bool)
    above_ok[:-1] = (guess[:-1] > 0) & (guess[:-1] < half[1:])  # root j + 1, from its lower pole j
    from_above = np.zeros(d, dtype=bool)
    from_above[1:] = above_ok[:-1]
    origin = idx.copy()
    offset = np.zeros(d)
    lo = np.empty(d)
    hi = np.zeros(d)
    lo[0] = -half[0]
    lo[1:] = -2.0 * half[1:]  # the whole interval, measured from the upper pole
    use_up = below_ok & ~from_above
    use_lo = from_above & ~below_ok
    offset[use_up] = guess[use_up]
    origin[use_lo] -= 1
    offset[use_lo] = guess[origin[use_lo]]
    lo[use_lo], hi[use_lo] = 0.0, 2.0 * half[use_lo]
    # No single candidate: decide the nearer pole by the sign of g − 1 at the midpoint.
    rest = idx[~(use_up | use_lo)]
    if rest.size:
        nu_mid = np.where(rest == 0, e[0] - half[0], e[rest] - half[rest])
        g_mid = (1.0 / (e[None, :] - nu_mid[:, None])) @ w
        near_lo = (rest > 0) & (g_mid > 1.0)
        origin[rest[near_lo]] -= 1
        offset[rest] = np.where(near_lo, half[rest], -half[rest])
        lo[rest[near_lo]], hi[rest[near_lo]] = 0.0, half[rest[near_lo]]
        lo[rest[~near_lo]] = -half[rest[~near_lo]]
        offset[rest[rest == 0]] = -half[0]
    offset, lo, hi = _iterate(P, w, origin, offset, lo, hi, work, max_sweeps)
    # A root that ended nearer its other pole is measured again from that one (precision).
    far = (idx > 0) & (np.abs(offset) > half * (1.0 + 1e-12))
    if far.any():
        k = idx[far]
        up = origin[k] == k  # measured from the upper pole: move to the lower one
        new_origin = np.where(up, k - 1, k)
        offset[k] = np.where(up, 2.0 * half[k] + offset[k], offset[k] - 2.0 * half[k])
        origin[k] = new_origin
        lo[k] = np.where(up, 0.0, -2.0 * half[k])
        hi[k] = np.where(up, 2.0 * half[k], 0.0)
        offset[k] = np.clip(offset[k], lo[k], hi[k])
        mask = np.zeros(d, dtype=bool)
        mask[k] = True
        offset, lo, hi = _iterate(P, w, origin, offset, lo, hi, work, max_sweeps, only=mask)
    diff = P[origin]
    diff -= offset[:, None]
    inv = np.reciprocal(diff, out=work)
    return SecularRoots(origin=origin, offset=offset, nu=e[origin] + offset, diff=diff, inv_diff=inv)


@functools.lru_cache(maxsize=4)
def _triangles(d: int) -> tuple[np.ndarray, np.ndarray]:
    """(d, d) masks, 1.0 where pole ``i`` lies below root ``k`` (``i < k``), and the complement."""
    idx = np.arange(d)
    below = (idx[None, :] < idx[:, None]).astype(float)
    above = 1.0 - below
    below.setflags(write=False)
    above.setflags(write=False)
    return below, above


def _iterate(P, w, origin, offset, lo, hi, work, max_sweeps, only=None):
    """Li's middle-way iteration on the roots (all, or those in ``only``), bracket-safeguarded."""
    d = w.size
    idx = np.arange(d)
    below, above = _triangles(d)
    scratch = np.empty_like(work)
    active = idx if only is None else idx[only]
    rows = np.arange(d)
    for _ in range(max_sweeps):
        if active.size == 0:
            break
        k = active
        n = k.size
        delta = np.take(P, origin[k], axis=0, out=work[:n])
        delta -= offset[k, None]  # e_i − ν
        d_hi = delta[rows[:n], k].copy()  # e_k − ν > 0
        d_lo = np.where(k > 0, delta[rows[:n], np.maximum(k - 1, 0)], -np.inf)
        inv = np.reciprocal(delta, out=delta)
        f = inv @ w - 1.0
        inv *= inv
        masked = scratch[:n]
        dpsi = np.multiply(inv, below if n == d else below[k], out=masked) @ w
        dphi = np.multiply(inv, above if n == d else above[k], out=masked) @ w
        # Bracket: g increases in ν, so g > 1 puts the root below the iterate.
        up = f > 0
        hi[k] = np.where(up, offset[k], hi[k])
        lo[k] = np.where(up, lo[k], offset[k])
        # Middle way: the poles below and above as one pole each plus a constant, matching value
        # and slope; with ψ + φ = f + 1 the constant is c = −f + ψ′·Δlo + φ′·Δhi.
        b2 = dphi * d_hi**2
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            b1 = np.where(k > 0, dpsi * d_lo**2, 0.0)
            c = -f + np.where(k > 0, dpsi * d_lo, 0.0) + dphi * d_hi
            # c = b1/(Δlo − y) + b2/(Δhi − y) has exactly one root y in (Δlo, Δhi).
            bq = c * (d_lo + d_hi) - b1 - b2
            cq = c * d_lo * d_hi - b1 * d_hi - b2 * d_lo
            disc = np.sqrt(np.maximum(bq * bq - 4.0 * c * cq, 0.0))
            qq = 0.5 * (bq + np.copysign(disc, bq))
            y1 = qq / c
            y2 = cq / qq
            y_lin = (b1 * d_hi + b2 * d_lo) / (b1 + b2)
            y_top = d_hi - b2 / c  # root 0: no pole below
        y = np.where((y1 > d_lo) & (y1 < d_hi), y1, y2)
        y = np.where(c == 0.0, y_lin, y)
        y = np.where(k == 0, y_top, y)
        new = offset[k] + y
        bad = ~np.isfinite(new) | (new < lo[k]) | (new > hi[k])
        # The step converges quadratically: one of relative size 1e-9 leaves an error of ~1e-18.
        done = (f == 0.0) | (~bad & (np.abs(y) <= _QUADRATIC_DONE * np.abs(offset[k])))
        new = np.where(f == 0.0, offset[k], np.where(bad, 0.5 * (lo[k] + hi[k]), new))
        offset[k] = new
        done |= (hi[k] - lo[k]) <= 4.0 * _EPS * np.abs(new)
        active = k[~done]
    return offset, lo, hi

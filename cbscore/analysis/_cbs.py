"""The critical batch size ``B*`` by the paper's overhead rule (DESIGN.md §1, "CBS").

Linear scaling from ``B_ref`` predicts ``S_lin(B) = S(B_ref)·B_ref/B``; ``B*`` is the largest
``B > B_ref`` with ``S(B) ≤ (1 + r)·S_lin(B)`` (Zhang et al. 2025, arXiv 2410.21676, §2.2, with
``r = 0.2``). Equivalently ``B·S(B) ≤ (1 + r)·B_ref·S(B_ref)``: the compute spent to reach the
target at ``B`` is at most ``1 + r`` times that at ``B_ref``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from cbscore.errors import ConfigError, FitError

#: The paper's overhead ``r``: 20% more compute than linear scaling from ``B_ref``.
DEFAULT_OVERHEAD = 0.2
#: The paper's reference batch size (sequences).
DEFAULT_B_REF = 256.0


def check_cbs_settings(overhead: float, b_ref: float) -> None:
    """Raise :class:`ConfigError` unless ``overhead`` and ``b_ref`` are positive finite numbers."""
    for field, value in (("overhead", overhead), ("b_ref", b_ref)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
            raise ConfigError(field, value, "must be a positive finite number")
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(field, value, "must be a positive finite number")


def cbs_closed_form(b_noise, b_ref: float = DEFAULT_B_REF, overhead: float = DEFAULT_OVERHEAD):
    """``B* = (1 + r)·B_ref + r·B_noise`` for ``S(B) = S_min·(1 + B_noise/B)``.

    Derivation: ``B·S(B) = S_min·(B + B_noise) ≤ (1 + r)·S_min·(B_ref + B_noise)`` gives
    ``B ≤ (1 + r)·B_ref + r·B_noise`` (DESIGN.md §1). Works elementwise on arrays; an infinite
    ``B_noise`` (no ``S_min`` resolved) gives an infinite ``B*``.
    """
    return (1.0 + overhead) * b_ref + overhead * np.asarray(b_noise, dtype=float)


def cbs_empirical(
    batch_sizes: Sequence[float],
    steps: Sequence[float],
    b_ref: float = DEFAULT_B_REF,
    overhead: float = DEFAULT_OVERHEAD,
) -> float:
    """``B*`` read off measured points, interpolated on log–log axes.

    Every measured ``B > B_ref`` passes when ``B·S(B) ≤ (1 + r)·B_ref·S(B_ref)``. ``B*`` lies
    between the largest passing point and the next (failing) point, where the straight line
    through them on log–log axes meets the threshold line ``S = (1 + r)·S(B_ref)·B_ref/B``
    (itself straight on those axes). With no passing point above ``B_ref`` the interpolation
    runs from ``B_ref`` itself, which always passes.

    ``S(B_ref)`` must be measured: if ``B_ref`` is not one of the batch sizes but lies inside
    their range, ``S(B_ref)`` is interpolated on log–log axes between its two neighbours; outside
    the range the empirical ``B*`` is refused (the fitted closed form still holds, with
    ``S(B_ref)`` from the fit).

    Raises:
        FitError: ``B_ref`` outside the measured range, no measured batch size above ``B_ref``,
            or every point above ``B_ref`` passes (``B*`` lies beyond the largest measured ``B``).
    """
    check_cbs_settings(overhead, b_ref)
    order = np.argsort(batch_sizes, kind="stable")
    log_b = np.log(np.asarray(batch_sizes, dtype=float)[order])  # (K,)
    log_s = np.log(np.asarray(steps, dtype=float)[order])  # (K,)
    log_ref = math.log(b_ref)
    if not log_b[0] - 1e-12 <= log_ref <= log_b[-1] + 1e-12:
        raise FitError(
            f"empirical CBS needs a measured S(B_ref): B_ref = {b_ref:g} lies outside the measured "
            f"batch sizes [{math.exp(log_b[0]):g}, {math.exp(log_b[-1]):g}]"
        )
    log_s_ref = float(np.interp(log_ref, log_b, log_s))  # exact where B_ref was measured
    above = log_b > log_ref + 1e-12
    if not above.any():
        raise FitError(f"empirical CBS needs a measured batch size above B_ref = {b_ref:g}")
    # u(B) = log(B·S(B)) - log((1 + r)·B_ref·S(B_ref)); pass ⇔ u ≤ 0, and u(B_ref) = -log(1 + r).
    log_b = np.concatenate([[log_ref], log_b[above]])
    u = np.concatenate([[log_ref + log_s_ref], log_b[1:] + log_s[above]])
    u -= math.log1p(overhead) + log_ref + log_s_ref
    passing = np.flatnonzero(u <= 0.0)
    last = int(passing[-1])
    if last == len(u) - 1:
        raise FitError(
            f"empirical CBS lies beyond the largest measured batch size "
            f"({math.exp(log_b[-1]):g}): every point above B_ref passes the {overhead:g} overhead rule"
        )
    frac = (0.0 - u[last]) / (u[last + 1] - u[last])
    return float(math.exp(log_b[last] + frac * (log_b[last + 1] - log_b[last])))

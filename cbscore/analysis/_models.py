"""The fitted models, written as ``f(x, *params)`` (the scipy ``curve_fit`` convention)."""

from __future__ import annotations

import numpy as np


def steps_model(batch_size, s_min, b):
    """Steps to target at batch size ``B``: ``S(B) = a + b/B``.

    McCandlish et al. 2018 (arXiv 1812.06162, eq. 2.11) with ``a = S_min`` and ``b/a = B_noise``;
    Zhang et al. 2025 (arXiv 2410.21676, §3) fit it on ``log S``.
    """
    return s_min + b / np.asarray(batch_size, dtype=float)


def steps_model_free(batch_size, s_min, b, alpha):
    """The free-exponent variant ``S(B) = a + b·B^-alpha`` (``alpha = 1`` is :func:`steps_model`)."""
    return s_min + b * np.asarray(batch_size, dtype=float) ** (-alpha)


def power_law(x, coef, exponent):
    """``y = c·x^alpha``, fitted as a straight line on log axes (Zhang et al. 2025, §4)."""
    return coef * np.asarray(x, dtype=float) ** exponent


def joint_power_law(nd, coef, exponent_n, exponent_d):
    """``B* = c·N^alpha·D^beta``; ``nd`` is the pair ``(N, D)`` of equal-shaped arrays."""
    n, d = nd
    return coef * np.asarray(n, dtype=float) ** exponent_n * np.asarray(d, dtype=float) ** exponent_d

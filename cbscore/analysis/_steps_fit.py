"""The fitted ``S(B)`` curve and its critical batch size (DESIGN.md §1, "The S(B) curve")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cbscore.analysis._cbs import (
    DEFAULT_B_REF,
    DEFAULT_OVERHEAD,
    cbs_closed_form,
    check_cbs_settings,
)
from cbscore.analysis._logfit import fit_log_linear
from cbscore.analysis._models import steps_model, steps_model_free
from cbscore.errors import FitError

#: Fewest distinct batch sizes a curve with two parameters is fitted to.
MIN_BATCH_SIZES = 3


@dataclass(frozen=True, kw_only=True)
class StepsFit:
    """``S(B) = a + b·B^-alpha`` fitted by least squares on ``log S``.

    With ``alpha = 1`` (the paper's model) ``a = S_min`` and ``b/a = B_noise`` (McCandlish et al.
    2018, arXiv 1812.06162, eq. 2.11). With a free exponent, ``B_noise = (b/a)^(1/alpha)`` so that
    ``S(B) = S_min·(1 + (B_noise/B)^alpha)`` keeps ``B_noise`` in units of sequences.
    """

    a: float
    """``S_min``: steps to target at infinite batch size."""
    b: float
    """Coefficient of ``B^-alpha`` (steps·sequences^alpha)."""
    alpha: float
    """Exponent of ``B``; exactly 1.0 unless fitted with ``free_alpha``."""
    free_alpha: bool
    """Whether ``alpha`` was fitted."""
    batch_sizes: tuple[float, ...]
    """Batch sizes of the fitted points (sequences), ascending."""
    steps: tuple[float, ...]
    """Measured ``S(B)`` at those batch sizes."""
    fitted: tuple[float, ...]
    """The fitted ``S(B)`` at those batch sizes."""
    residuals: tuple[float, ...]
    """``log S - log S_fit`` at those batch sizes (the fit minimises their squares)."""
    r2: float
    """Coefficient of determination of the fit on ``log S``."""
    lower_bounds: tuple[tuple[float, float], ...] = ()
    """``(B, steps)`` of censored cells, ``S(B) > steps``, as the fit used them: a bound above the
    steps measured at a smaller batch size is lowered to those (steps never grow with B)."""
    censored_fit: bool = False
    """Whether the lower bounds moved the fit (the least-squares curve fell below one of them, and
    the censored likelihood was maximised instead)."""

    @property
    def s_min(self) -> float:
        """Steps to target at infinite batch size."""
        return self.a

    @property
    def b_noise(self) -> float:
        """The noise scale ``B_noise`` in sequences (``b/a`` when ``alpha = 1``)."""
        return (self.b / self.a) ** (1.0 / self.alpha)

    @property
    def params(self) -> tuple[float, ...]:
        """Parameters for :attr:`model`: ``(a, b)`` or ``(a, b, alpha)``."""
        return (self.a, self.b, self.alpha) if self.free_alpha else (self.a, self.b)

    @property
    def model(self):
        """The model ``f(B, *params)`` (:func:`steps_model` or :func:`steps_model_free`)."""
        return steps_model_free if self.free_alpha else steps_model

    def __call__(self, batch_size):
        """Fitted ``S(B)`` at any batch size(s)."""
        return self.model(batch_size, *self.params)

    def cbs(self, overhead: float = DEFAULT_OVERHEAD, b_ref: float = DEFAULT_B_REF) -> float:
        """The largest ``B > B_ref`` with ``S(B) ≤ (1 + r)·S(B_ref)·B_ref/B`` on the fitted curve.

        Closed form ``(1 + r)·B_ref + r·B_noise`` for ``alpha = 1`` (DESIGN.md §1); a root of
        ``B·S(B) = (1 + r)·B_ref·S(B_ref)`` otherwise (``B·S(B)`` is increasing for
        ``alpha ≤ 1`` and convex for ``alpha > 1``, so above ``B_ref`` there is exactly one).
        ``S(B_ref)`` always comes from the fit, so ``B_ref`` need not be a measured batch size.
        """
        check_cbs_settings(overhead, b_ref)
        if not self.free_alpha:
            return float(cbs_closed_form(self.b_noise, b_ref, overhead))
        from scipy.optimize import brentq

        budget = (1.0 + overhead) * b_ref * float(self(b_ref))

        def excess(batch_size: float) -> float:
            return batch_size * float(self(batch_size)) - budget

        hi = 2.0 * b_ref
        while excess(hi) <= 0.0:  # B·S(B) ~ a·B grows without bound, so this ends
            hi *= 2.0
        return float(brentq(excess, b_ref, hi, xtol=1e-12 * hi, rtol=1e-14, maxiter=500))


def fit_steps(
    batch_sizes: Sequence[float], steps: Sequence[float], *, free_alpha: bool = False,
    lower_bounds: Sequence[tuple[float, float]] = (),
) -> StepsFit:
    """Fit ``S(B) = a + b/B`` (or ``a + b·B^-alpha``) by least squares on ``log S``.

    The paper's choice (Zhang et al. 2025, arXiv 2410.21676, §3.1): errors in steps-to-target
    are multiplicative, so every point weighs the same on a log scale.

    ``lower_bounds`` are censored cells, ``(B, s)`` with ``S(B) > s`` (DESIGN.md §1: a lower bound
    stays in the fit as one, never dropped and never averaged). Where the least-squares curve
    already lies above every bound they change nothing; otherwise the censored (Tobit) likelihood
    on ``log S`` is maximised (Tobin 1958; Amemiya 1984, §3): normal residuals of the measured
    points, and ``log Φ((log f(B) − log s)/σ)`` for each bound, with ``σ`` the least-squares
    residual scale (floored at :data:`CENSORED_SIGMA_FLOOR`, so that three exact points do not
    make a bound a wall). A free exponent ignores the bounds (noted by the caller).

    Raises:
        FitError: mismatched lengths, a non-positive or non-finite value, fewer than
            :data:`MIN_BATCH_SIZES` distinct batch sizes, a curve that does not fall
            (``b ≤ 0``), or one still in linear scaling at the largest batch size (``a ≤ 0``:
            ``S_min`` not resolved).
    """
    b_arr = np.asarray(batch_sizes, dtype=float)
    s_arr = np.asarray(steps, dtype=float)
    if b_arr.ndim != 1 or b_arr.shape != s_arr.shape:
        raise FitError(
            f"batch sizes and steps must be two lists of the same length, but got "
            f"{b_arr.shape} and {s_arr.shape}"
        )
    for name, arr in (("batch size", b_arr), ("steps", s_arr)):
        bad = ~np.isfinite(arr) | (arr <= 0)
        if bad.any():
            raise FitError(f"every {name} must be a positive finite number, but got {arr[bad][0]!r}")
    n_distinct = len(np.unique(b_arr))
    if n_distinct < MIN_BATCH_SIZES:
        raise FitError(f"fewer than {MIN_BATCH_SIZES} distinct batch sizes (got {n_distinct})")
    order = np.argsort(b_arr, kind="stable")
    b_arr, s_arr = b_arr[order], s_arr[order]
    log_s = np.log(s_arr)  # (K,)
    a, b = (float(v[0]) for v in fit_log_linear(1.0 / b_arr, log_s[None, :]))
    alpha = 1.0
    _check_shape(a, b, s_arr)
    bounds = tuple((float(bb), float(ss)) for bb, ss in lower_bounds
                   if math.isfinite(float(bb)) and float(bb) > 0 and math.isfinite(float(ss)) and float(ss) > 0)
    # Steps to target never grow with B (McCandlish et al. 2018, eq. 2.11): a bound above the steps
    # measured at a smaller batch size says no more than "no faster than there" (a cell censored
    # past that is an optimisation failure, not a slower S(B)).
    bounds = tuple((bb, min([ss, *(float(v) for b, v in zip(b_arr, s_arr) if b < bb)])) for bb, ss in bounds)
    censored_fit = False
    if bounds and not free_alpha:
        lb_b = np.array([bb for bb, _ in bounds])
        lb_s = np.array([ss for _, ss in bounds])
        if np.any(a + b / lb_b < lb_s):
            a, b = _fit_censored(b_arr, log_s, lb_b, lb_s, a, b)
            _check_shape(a, b, s_arr)
            censored_fit = True
    if free_alpha:
        a, b, alpha = _fit_free_alpha(b_arr, log_s, a, b)
        _check_shape(a, b, s_arr)
    fitted = steps_model_free(b_arr, a, b, alpha)
    residuals = log_s - np.log(fitted)
    ss_tot = float(np.sum((log_s - log_s.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residuals**2)) / ss_tot if ss_tot > 0 else math.nan
    return StepsFit(
        a=a,
        b=b,
        alpha=alpha,
        free_alpha=free_alpha,
        batch_sizes=tuple(float(v) for v in b_arr),
        steps=tuple(float(v) for v in s_arr),
        fitted=tuple(float(v) for v in fitted),
        residuals=tuple(float(v) for v in residuals),
        r2=r2,
        lower_bounds=bounds,
        censored_fit=censored_fit,
    )


#: Smallest residual scale (on ``log S``) the censored likelihood uses: about the scatter of
#: steps-to-target between learning rates of one cell.
CENSORED_SIGMA_FLOOR = 0.05


def _fit_censored(batch_sizes: np.ndarray, log_s: np.ndarray, lb_b: np.ndarray, lb_s: np.ndarray,
                  a0: float, b0: float) -> tuple[float, float]:
    """Maximise the Tobit likelihood of ``log S = log(a + b/B) + ε``, ``ε ~ N(0, σ²)``, with the
    measured points exact and the bounds censored from below (see :func:`fit_steps`)."""
    from scipy.optimize import minimize
    from scipy.special import log_ndtr  # log Φ, without importing scipy.stats (a second to load)

    resid = log_s - np.log(a0 + b0 / batch_sizes)
    dof = max(len(log_s) - 2, 1)
    sigma = max(float(np.sqrt(np.sum(resid**2) / dof)), CENSORED_SIGMA_FLOOR)
    log_lb = np.log(lb_s)

    def nll(theta: np.ndarray) -> float:
        a, b = np.exp(theta)
        r = (log_s - np.log(a + b / batch_sizes)) / sigma
        z = (np.log(a + b / lb_b) - log_lb) / sigma
        return float(0.5 * np.sum(r * r) - np.sum(log_ndtr(z)))

    x0 = np.log([max(a0, 1e-9 * float(np.exp(log_s).min())), max(b0, 1e-9)])
    result = minimize(nll, x0, method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 4000})
    a, b = (float(v) for v in np.exp(result.x))
    return a, b


def _check_shape(a: float, b: float, steps: np.ndarray) -> None:
    # Relative thresholds: the bounded solver puts a parameter exactly at 0 when the data push it
    # below; a value that is zero to rounding is the same verdict.
    if b <= 1e-12 * float(steps.max()):
        raise FitError("S(B) does not fall with batch size (fitted b <= 0)")
    if a <= 1e-12 * float(steps.min()):
        raise FitError(
            "S(B) still falls like 1/B at the largest batch size (fitted S_min <= 0): "
            "no B_noise can be read off; measure larger batch sizes"
        )


def _fit_free_alpha(
    batch_sizes: np.ndarray, log_s: np.ndarray, a0: float, b0: float
) -> tuple[float, float, float]:
    """``a + b·B^-alpha`` on ``log S``, started from the ``alpha = 1`` solution."""
    from scipy.optimize import least_squares

    if len(np.unique(batch_sizes)) < 4:
        raise FitError(
            f"a free exponent needs at least 4 distinct batch sizes (got {len(np.unique(batch_sizes))})"
        )
    # S = a + c·(B/B0)^-alpha with B0 the geometric mean of B: c stays of the order of S whatever
    # alpha is, so the three parameters are scaled alike; b = c·B0^alpha.
    b0_geo = float(np.exp(np.mean(np.log(batch_sizes))))
    ratio = batch_sizes / b0_geo
    scale = np.array([a0, b0 / b0_geo, 1.0])

    def resid(p: np.ndarray) -> np.ndarray:
        a, c, alpha = p * scale
        return log_s - np.log(a + c * ratio ** (-alpha))

    # Lower bounds keep a + c·(B/B0)^-alpha positive; alpha in [0.05, 5] spans any plausible curve.
    result = least_squares(
        resid, x0=[1.0, 1.0, 1.0], bounds=([1e-9, 1e-9, 0.05], [np.inf, np.inf, 5.0]),
        xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=5000,
    )
    if not result.success:
        raise FitError(f"the free-exponent fit did not converge: {result.message}")
    a, c, alpha = (float(v) for v in result.x * scale)
    return a, c * b0_geo**alpha, alpha

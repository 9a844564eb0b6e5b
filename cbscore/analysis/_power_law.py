"""One-variable scaling law ``B* = c·x^alpha`` fitted on log axes (DESIGN.md §1, "Scaling laws").

Its interval comes from a random-effects meta-regression (:func:`law_draws`): each setting
weighted by the variance of its own bootstrap draws of ``B*`` plus a between-setting variance
estimated from the scatter around the law, so it carries both each setting's uncertainty and the
settings' scatter beyond it, at about the ideal width when there is no such scatter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cbscore.analysis._forecast import Forecast
from cbscore.analysis._interval import LEVEL, percentile_interval
from cbscore.analysis._models import power_law
from cbscore.errors import FitError

#: Names of the variable of a one-variable law.
VARIABLES = {"n": "n_params", "d": "tokens"}
#: The paper's units (Zhang et al. 2025, arXiv 2410.21676, §4): N in millions, D in billions.
PAPER_UNITS = {"n": 1e6, "d": 1e9}
#: How the paper's units read, per variable.
PAPER_UNIT_NAMES = {"n": "N in millions", "d": "D in billions"}
#: Fewest settings behind an interval: the law's two parameters and one residual degree of freedom.
MIN_SETTINGS_CI = 3
#: What a law holds fixed (``PowerLawFit.fixed_name``), and what kind of law that makes.
KINDS = {
    "tokens": "n at fixed D",
    "n_params": "d at fixed N",
    "tokens_per_param": "n and d together (D ∝ N)",
}


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array, dtype=float)
    array.setflags(write=False)
    return array


def check_positive(name: str, values: np.ndarray) -> None:
    """Raise :class:`FitError` unless every value is a positive finite number."""
    bad = ~np.isfinite(values) | (values <= 0)
    if bad.any():
        raise FitError(f"every {name} must be a positive finite number, but got {values[bad][0]!r}")


@dataclass(frozen=True, kw_only=True, eq=False)
class SharedDraws:
    """Random numbers that every law of one study draws from, so that the draws of two laws pair
    up (draw ``r`` of every law uses row ``r`` of these and draw ``r`` of each setting's ``B*``)."""

    scatter: np.ndarray
    """(P, R) standard normals, one row per setting of the law: that setting's share of the
    scatter beyond its draws in each draw."""
    uniform: np.ndarray
    """(R,) uniforms on (0, 1): the Student-t scale of each draw."""

    @classmethod
    def draw(cls, n_settings: int, n_draws: int, rng: np.random.Generator) -> SharedDraws:
        """Fresh shared draws for ``n_settings`` settings."""
        return cls(scatter=rng.standard_normal((n_settings, n_draws)), uniform=rng.random(n_draws))

    def rows(self, index: Sequence[int]) -> SharedDraws:
        """The shared draws of a subset of the settings (a law's group)."""
        return SharedDraws(scatter=self.scatter[list(index)], uniform=self.uniform)


@dataclass(frozen=True, kw_only=True, eq=False)
class LawDraws:
    """A random-effects fit of ``log B* = design @ coeffs`` and its draws (:func:`law_draws`)."""

    coeffs: np.ndarray
    """(k,) the point fit: weighted least squares with weights ``1/(v_i + tau2)``."""
    samples: np.ndarray
    """(R, k) draws of the coefficients; ``nan`` rows where a setting drew an unbounded ``B*``."""
    tau2: float
    """Between-setting variance of ``log B*`` beyond each setting's own draws."""
    dof: float
    """Satterthwaite degrees of freedom of the draws' Student-t scale (``inf``: normal)."""
    n_unbounded: int
    """Draws in which a setting drew an infinite ``B*`` (its ``S_min`` fitted to 0)."""

    @property
    def unbounded_share(self) -> float:
        return self.n_unbounded / len(self.samples) if len(self.samples) else 1.0


#: Fewest residual degrees of freedom (settings minus parameters) for the Student-t scale. With
#: one (3 settings) the Satterthwaite t_1 tails (12.7 for 95%) widen the interval several-fold as
#: soon as any scatter beyond the draws is seen, without covering more: what such studies miss
#: are those whose scatter happened to look small (tau2 = 0), which no quantile widens. So with
#: one the draws are normal; in simulation that covers 90-98% in regime (a) and with extra scatter
#: of 0.5x the draws (~89% at 0.75x, ~84% at 2x) (tests/cbscore/analysis/test_law_coverage.py).
MIN_RESIDUAL_DOF = 2
#: Floor of a setting's variance of log ``B*`` (an exact curve's draws have none): a standard
#: deviation of 1e-6, far below any measurement, that keeps the weights finite.
MIN_VARIANCE = 1e-12


def _wls(design: np.ndarray, log_y: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least squares: ``(coeffs, (X'WX)^-1)``."""
    xw = design * weights[:, None]  # (P, k)
    cov = np.linalg.inv(design.T @ xw)  # (k, k)
    return cov @ (xw.T @ log_y), cov


def generalized_q(design: np.ndarray, log_y: np.ndarray, variances: np.ndarray, tau2: float) -> float:
    """``Q(tau2) = sum w_i r_i^2`` with ``w_i = 1/(v_i + tau2)`` and the weighted fit's residuals."""
    weights = 1.0 / (variances + tau2)
    coeffs, _ = _wls(design, log_y, weights)
    resid = log_y - design @ coeffs
    return float(np.sum(weights * resid**2))


def between_setting_variance(design: np.ndarray, log_y: np.ndarray, variances: np.ndarray) -> float:
    """``tau2`` of the settings' scatter beyond their own draws: the root of
    ``Q(tau2) = median of chi2_{P-k}``, truncated at 0.

    The generalized ``Q`` of the random-effects meta-regression is ``chi2_{P-k}`` at the true
    ``tau2`` and falls as ``tau2`` grows; solving ``Q = P - k`` is the Paule & Mandel (1982)
    estimator, solving it at the median of ``chi2_{P-k}`` is the median-unbiased point of the
    Q-profile (Viechtbauer 2007, Stat. Med. 26:37). The median is the choice that keeps the
    interval's width at the ideal in at least half the studies whose scatter is measurement
    noise only (then ``Q < median`` half the time and ``tau2 = 0``), while a smaller ``tau2``
    (Paule-Mandel's, above the median for one residual degree of freedom) covers less when the
    settings do scatter beyond their draws.
    """
    from scipy import special  # lazy: scipy's import is slow and most callers never get here

    p, k = design.shape
    target = 2.0 * float(special.gammaincinv((p - k) / 2.0, 0.5))  # median of chi2_{P-k}
    if generalized_q(design, log_y, variances, 0.0) <= target:
        return 0.0
    ols, *_ = np.linalg.lstsq(design, log_y, rcond=None)
    hi = float(np.sum((log_y - design @ ols) ** 2)) / target  # Q(hi) <= RSS_OLS/hi = target
    lo = 0.0
    for _ in range(100):  # bisection: Q is decreasing in tau2
        mid = 0.5 * (lo + hi)
        if generalized_q(design, log_y, variances, mid) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return 0.5 * (lo + hi)


def law_draws(
    design: np.ndarray,
    log_y: np.ndarray,
    cbs_samples: Sequence[np.ndarray],
    shared: SharedDraws,
    dof_columns: Sequence[int] = (1,),
) -> LawDraws:
    """Random-effects meta-regression of ``log B*`` on ``design`` and draws of its coefficients.

    The model (DerSimonian & Laird 1986; for a regression, Raudenbush 2009, "Analyzing effect
    sizes: random-effects models"): ``log B*_i = x_i·coeffs + u_i + e_i``, ``e_i`` the setting's
    own measurement error, of variance ``v_i`` read off its bootstrap draws of ``B*`` (the square
    of half their central 68% range on log axes, robust to a skewed bootstrap), and ``u_i`` the
    scatter around the law beyond the draws, of variance ``tau2``
    (:func:`between_setting_variance`). The point fit is weighted least squares with weights
    ``w_i = 1/(v_i + tau2)`` and covariance ``(X'WX)^-1``.

    Draw ``r`` is ``coeffs + g_r·A·(e_{·r} + sqrt(tau2)·z_{·r})``, with ``A = (X'WX)^-1 X'W``:
    ``e_{ir}`` is setting ``i``'s own draw ``r`` of ``log B*`` minus the median of its draws
    (so each setting's uncertainty enters with its own shape), ``z_{ir}`` its shared standard
    normal (:class:`SharedDraws`), and ``g_r = sqrt(d/chi2_d)`` the Student-t scale for the
    estimated ``tau2``, with ``d`` the Satterthwaite (1946) degrees of freedom of the variance
    ``A(V + tau2)A'``: its known part ``A V A'`` has infinitely many, its ``tau2`` part ``P - k``,
    so ``d = (P - k)·(total/tau2 part)^2``, ``inf`` when ``tau2 = 0``. The percentile interval of
    the draws is then about ``coeffs ± t_d·se``: in simulation (tests/cbscore/analysis/
    test_law_coverage.py) it covers 96-98% when the scatter is measurement noise only, at
    1.1-1.3x the ideal median width, and 91-94% when the settings scatter beyond their draws
    (5 settings: extra scatter 1-2x the draws; 3 settings: 0.5x, see :data:`MIN_RESIDUAL_DOF`).

    Args:
        design: (P, k) design matrix, first column ones, the others centred logs.
        log_y: (P,) ``log B*`` of the settings.
        cbs_samples: per setting, its bootstrap samples of ``B*``; draw ``r`` uses sample
            ``r mod len``.
        shared: the random numbers of the draws (their count is the number of draws).
        dof_columns: the coefficients whose Satterthwaite degrees of freedom set ``d`` (the
            smallest of them): the exponents.
    """
    from scipy import special

    p, k = design.shape
    n_draws = shared.uniform.shape[0]
    dev = np.empty((p, n_draws))  # (P, R) each setting's draws of log B* about their median
    variances = np.empty(p)
    with np.errstate(divide="ignore"):
        for i, samples in enumerate(cbs_samples):
            logs = np.log(np.asarray(samples, dtype=float).ravel())
            finite = logs[np.isfinite(logs)]
            if finite.size == 0:
                lo = mid = hi = 0.0
            else:
                lo, mid, hi = np.quantile(finite, [_NORMAL_68[0], 0.5, _NORMAL_68[1]])
            variances[i] = max(((hi - lo) / 2.0) ** 2, MIN_VARIANCE)
            dev[i] = logs[np.arange(n_draws) % logs.size] - mid
    tau2 = between_setting_variance(design, log_y, variances)
    weights = 1.0 / (variances + tau2)
    coeffs, cov = _wls(design, log_y, weights)
    a = cov @ (design * weights[:, None]).T  # (k, P)
    part_v = (a**2) @ variances  # (k,)
    part_tau = (a**2).sum(axis=1) * tau2  # (k,)
    dof = math.inf
    if tau2 > 0 and p - k >= MIN_RESIDUAL_DOF:
        dof = min(float((p - k) * ((part_v[j] + part_tau[j]) / part_tau[j]) ** 2) for j in dof_columns)
    scale = np.ones(n_draws)
    if math.isfinite(dof):
        chi2 = 2.0 * special.gammaincinv(dof / 2.0, shared.uniform)  # (R,) chi2_d quantiles
        scale = np.sqrt(dof / np.maximum(chi2, 1e-300))
    bounded = np.all(np.isfinite(dev), axis=0)  # (R,)
    noise = np.where(bounded, dev, 0.0) + math.sqrt(tau2) * shared.scatter  # (P, R)
    samples = coeffs[None, :] + scale[:, None] * (a @ noise).T  # (R, k)
    samples[~bounded] = np.nan
    return LawDraws(coeffs=coeffs, samples=_frozen(samples), tau2=float(tau2), dof=dof,
                    n_unbounded=int(np.sum(~bounded)))


#: The central 68.27% of a normal (±1 standard deviation), as quantiles.
_NORMAL_68 = (0.15865525393145707, 0.8413447460685429)


def ci_from_draws(
    draws: np.ndarray, level: float, what: str, unbounded_share: float = 0.0
) -> tuple[tuple[float, float] | None, str | None]:
    """Percentile interval of the finite draws; ``None`` and a reason when too many were unbounded.

    A draw is unbounded when a setting's resampled ``B*`` was infinite (its ``S_min`` not
    resolved). Dropping up to one tail's worth of such draws cannot move the interval's far end
    past an infinite value unnoticed; beyond that the data do not support an interval.
    """
    if unbounded_share > (1.0 - level) / 2.0:
        return None, f"{what}: no interval, {unbounded_share:.0%} of the draws had an unbounded B*"
    finite = draws[np.isfinite(draws)]
    if finite.size == 0:
        return None, f"{what}: no interval, no draw could identify the law"
    return percentile_interval(finite, level), None


@dataclass(frozen=True, kw_only=True, eq=False)
class PowerLawFit:
    """``B* = coef·x^exponent`` across settings, by least squares on log axes.

    Zhang et al. 2025 (arXiv 2410.21676, §4) fit such laws to point estimates; the intervals here
    come from a random-effects meta-regression over the settings, weighted by each setting's own
    bootstrap draws of ``B*`` (:func:`law_draws`); with draws, the point fit is that weighted
    fit (ordinary least squares without). The law is only fitted across settings that hold the
    other variable fixed (:attr:`fixed_name`), never pooled across it.
    """

    variable: str
    """``"n"`` (non-embedding parameters) or ``"d"`` (training tokens)."""
    coef: float
    """``c`` (sequences per ``x^exponent``, ``x`` in parameters or tokens)."""
    exponent: float
    """``alpha``."""
    coef_ci: tuple[float, float] | None
    """Interval of ``c``; ``None`` without draws or when the draws cannot support one."""
    exponent_ci: tuple[float, float] | None
    """Interval of ``alpha``; ``None`` likewise."""
    x: tuple[float, ...]
    """The variable at each setting."""
    cbs: tuple[float, ...]
    """``B*`` at each setting (the fitted points)."""
    settings: tuple[str, ...]
    """Names of the settings, in the order of ``x``."""
    r2: float
    """Coefficient of determination on log axes (1.0 for two settings)."""
    level: float
    """Two-sided level of the intervals."""
    coef_samples: np.ndarray | None
    """(R,) ``c`` of every draw (``nan`` where a draw was degenerate or unbounded)."""
    exponent_samples: np.ndarray | None
    """(R,) ``alpha`` of every draw."""
    notes: tuple[str, ...] = ()
    """Why an interval is missing or rough, if it is."""
    fixed_name: str | None = None
    """What the settings of this law share: ``"tokens"`` (a law in ``N`` at fixed ``D``),
    ``"n_params"`` (a law in ``D`` at fixed ``N``) or ``"tokens_per_param"`` (a law in ``N`` with
    ``D ∝ N``, the paper's Chinchilla "N and D together"); ``None`` when the caller grouped them."""
    fixed_value: float | None = None
    """The shared value of :attr:`fixed_name` (tokens, parameters, or tokens per parameter, the
    geometric mean over the settings); ``None`` when it was not given."""

    @property
    def model(self):
        """The model ``f(x, coef, exponent)``."""
        return power_law

    @property
    def kind(self) -> str:
        """In words: ``"n at fixed D"``, ``"d at fixed N"``, ``"n and d together (D ∝ N)"``."""
        return KINDS.get(self.fixed_name or "", self.variable)

    @property
    def paper_units(self) -> str:
        """The units of :attr:`coef_paper_units`, e.g. ``"B* = c·N^alpha, N in millions"``."""
        name, sym = ("N", "alpha") if self.variable == "n" else ("D", "beta")
        return f"B* = c·{name}^{sym}, {PAPER_UNIT_NAMES[self.variable]}, B* in sequences"

    @property
    def coef_paper_units(self) -> float:
        """``c`` with ``x`` in the paper's units: ``c·scale^alpha`` with scale 10⁶ for ``N``
        (millions), 10⁹ for ``D`` (billions), since ``c·x^alpha = c·scale^alpha·(x/scale)^alpha``."""
        return self.coef * PAPER_UNITS[self.variable] ** self.exponent

    @property
    def coef_paper_units_ci(self) -> tuple[float, float] | None:
        """Interval of :attr:`coef_paper_units` over the draws."""
        if self.coef_samples is None or self.exponent_ci is None:
            return None
        values = self.coef_samples * PAPER_UNITS[self.variable] ** self.exponent_samples
        return percentile_interval(values[np.isfinite(values)], self.level)

    def __call__(self, x):
        """``B*`` on the fitted law at any ``x``."""
        return power_law(x, self.coef, self.exponent)

    def forecast(self, x: float) -> Forecast:
        """``B*`` at ``x`` with the percentile interval of the law's draws."""
        check_positive(VARIABLES[self.variable], np.array([x], dtype=float))
        ci = None
        if self.coef_samples is not None and self.exponent_ci is not None:
            values = self.coef_samples * float(x) ** self.exponent_samples
            ci = percentile_interval(values[np.isfinite(values)], self.level)
        n_params, tokens = (float(x), None) if self.variable == "n" else (None, float(x))
        return Forecast(
            cbs=float(self(x)), cbs_ci=ci, n_params=n_params, tokens=tokens, law=self.variable,
            fixed=self.kind if self.fixed_name else "",
        )


def fit_power_law(
    x: Sequence[float],
    cbs: Sequence[float],
    *,
    variable: str,
    settings: Sequence[str] | None = None,
    cbs_samples: Sequence[np.ndarray] | None = None,
    n_draws: int = 1000,
    seed: object = 0,
    level: float = LEVEL,
    fixed_name: str | None = None,
    fixed_value: float | None = None,
    shared: SharedDraws | None = None,
) -> PowerLawFit:
    """Fit ``log B* = log c + alpha·log x`` across settings.

    The caller decides which settings belong together (:func:`fit_scaling_laws` groups them by
    what they share); this function fits whatever it is given.

    Args:
        x: the variable (``N`` or ``D``) at each setting.
        cbs: ``B*`` at each setting.
        variable: ``"n"`` or ``"d"``.
        settings: names of the settings (for charts); defaults to their positions.
        cbs_samples: each setting's bootstrap samples of ``B*``; without them no intervals.
        n_draws: draws for the intervals.
        fixed_name, fixed_value: what the settings share (see :class:`PowerLawFit`).
        shared: the random numbers of the draws, one row per setting (:class:`SharedDraws`;
            :func:`fit_scaling_laws` passes one study-wide set so that laws' draws pair up);
            default: drawn from ``seed``, ``n_draws`` of them.

    Raises:
        FitError: fewer than 2 distinct values of ``x``, or a non-positive / non-finite value.
    """
    if variable not in VARIABLES:
        raise FitError(f"variable must be one of {', '.join(VARIABLES)}, but got {variable!r}")
    x_arr = np.asarray(x, dtype=float)
    y_arr = np.asarray(cbs, dtype=float)
    if x_arr.shape != y_arr.shape or x_arr.ndim != 1:
        raise FitError(f"x and B* must be two lists of the same length, but got {x_arr.shape} and {y_arr.shape}")
    n_distinct = len(np.unique(x_arr))
    if n_distinct < 2:
        raise FitError(
            f"fewer than 2 settings with distinct {VARIABLES[variable]} (got {n_distinct})"
        )
    check_positive(VARIABLES[variable], x_arr)
    check_positive("B*", y_arr)
    # Centred log x keeps the normal equations of every draw well conditioned.
    log_x = np.log(x_arr)
    centre = float(log_x.mean())
    design = np.stack([np.ones_like(x_arr), log_x - centre], axis=1)  # (P, 2)
    log_y = np.log(y_arr)  # (P,)
    coeffs, *_ = np.linalg.lstsq(design, log_y, rcond=None)  # (2,) intercept at the centre, slope
    ss_tot = float(np.sum((log_y - log_y.mean()) ** 2))
    coef_ci = exponent_ci = None
    coef_samples = exponent_samples = None
    notes: list[str] = []
    what = f"law in {VARIABLES[variable]}"
    if cbs_samples is not None and len(x_arr) < MIN_SETTINGS_CI:
        notes.append(
            f"{what}: no interval from {len(x_arr)} settings (an interval needs at least "
            f"{MIN_SETTINGS_CI}, so that their scatter around the law can be measured)"
        )
    elif cbs_samples is not None:
        if len(cbs_samples) != len(x_arr):
            raise FitError(f"one list of B* samples per setting, but got {len(cbs_samples)} for {len(x_arr)}")
        if shared is None:
            shared = SharedDraws.draw(len(x_arr), n_draws, np.random.default_rng(seed))
        draws = law_draws(design, log_y, cbs_samples, shared)
        coeffs = draws.coeffs  # the random-effects fit: weights 1/(v_i + tau2)
        log_c = draws.samples[:, 0] - draws.samples[:, 1] * centre  # back from the centred intercept
        coef_samples = _frozen(np.exp(log_c))
        exponent_samples = _frozen(draws.samples[:, 1])
        coef_ci, note = ci_from_draws(coef_samples, level, what, draws.unbounded_share)
        exponent_ci, _ = ci_from_draws(exponent_samples, level, what, draws.unbounded_share)
        notes += [note] if note else []
        if exponent_ci is not None and len(x_arr) == MIN_SETTINGS_CI:
            notes.append(f"{what}: interval from {len(x_arr)} settings only, read it as rough")
    resid = log_y - design @ coeffs
    r2 = 1.0 - float(np.sum(resid**2)) / ss_tot if ss_tot > 0 else math.nan
    return PowerLawFit(
        variable=variable,
        coef=float(math.exp(coeffs[0] - coeffs[1] * centre)),
        exponent=float(coeffs[1]),
        coef_ci=coef_ci,
        exponent_ci=exponent_ci,
        x=tuple(float(v) for v in x_arr),
        cbs=tuple(float(v) for v in y_arr),
        settings=tuple(settings) if settings is not None else tuple(str(i) for i in range(len(x_arr))),
        r2=r2,
        level=level,
        coef_samples=coef_samples,
        exponent_samples=exponent_samples,
        notes=tuple(notes),
        fixed_name=fixed_name,
        fixed_value=None if fixed_value is None else float(fixed_value),
    )

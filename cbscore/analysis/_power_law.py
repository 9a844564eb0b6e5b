"""One-variable scaling law ``B* = c·x^alpha`` fitted on log axes (DESIGN.md §1, "Scaling laws").

Its interval is a pairs bootstrap over settings combined with each setting's own bootstrap
draws of ``B*`` (:func:`pairs_draws`), so it carries both the settings' scatter around the law
and each setting's uncertainty.
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
class PairsDraws:
    """Coefficients of a log-linear law refitted to resampled settings (:func:`pairs_draws`)."""

    coeffs: np.ndarray
    """(R, k) coefficients of every draw, inflated about the point fit; ``nan`` rows where the
    draw was degenerate or drew an unbounded ``B*``."""
    n_degenerate: int
    """Draws whose resampled settings could not identify the law (one ``x``; collinear ``N, D``)."""
    n_unbounded: int
    """Non-degenerate draws that drew an infinite ``B*`` (a setting whose ``S_min`` fitted to 0)."""

    @property
    def unbounded_share(self) -> float:
        """Share of the non-degenerate draws that were unbounded."""
        valid = len(self.coeffs) - self.n_degenerate
        return self.n_unbounded / valid if valid else 1.0


def pairs_draws(
    design: np.ndarray,
    coeffs: np.ndarray,
    cbs_samples: Sequence[np.ndarray],
    n_draws: int,
    rng: np.random.Generator,
    max_correlation: float = 1.0,
) -> PairsDraws:
    """Pairs bootstrap of ``log B* = design @ coeffs`` over settings, with each setting's draws.

    Each draw resamples the ``P`` settings with replacement (the pairs bootstrap, Efron &
    Tibshirani 1993, §9.5; Davison & Hinkley 1997, §6.2.4), gives every resampled slot one of its
    setting's bootstrap samples of ``B*`` (DESIGN.md §1: the intervals carry each setting's
    uncertainty and the settings' scatter around the law) and refits by least squares. Draws are
    then inflated about the point fit by ``sqrt(P/(P-k))``, the HC1 small-sample factor of the
    sandwich variance the pairs bootstrap estimates (MacKinnon & White 1985): without it five
    settings give ~90% coverage of a nominal 95% interval, with it ~94% in simulation.

    Args:
        design: (P, k) design matrix, first column ones, the others centred logs.
        coeffs: (k,) the point fit.
        cbs_samples: per setting, its bootstrap samples of ``B*`` (length ``P``).
        max_correlation: a draw whose non-constant columns correlate more than this (in absolute
            value) is degenerate (the joint law: ``log N`` and ``log D`` that vary together).
    """
    p, k = design.shape
    idx = rng.integers(0, p, size=(n_draws, p))  # (R, P) settings of every draw
    log_y = np.empty((n_draws, p))  # (R, P)
    with np.errstate(divide="ignore"):
        for j, samples in enumerate(cbs_samples):
            samples = np.asarray(samples, dtype=float)
            hit = idx == j
            log_y[hit] = np.log(samples[rng.integers(0, len(samples), size=int(hit.sum()))])
    x = design[idx]  # (R, P, k)
    # Degenerate draws: a non-constant column that does not vary, or columns that vary together.
    centred = x[:, :, 1:] - x[:, :, 1:].mean(axis=1, keepdims=True)  # (R, P, k-1)
    cov = np.einsum("rpi,rpj->rij", centred, centred)  # (R, k-1, k-1)
    var = np.diagonal(cov, axis1=1, axis2=2)  # (R, k-1)
    scale = np.maximum(np.diagonal(design[:, 1:].T @ design[:, 1:]), 1e-300)  # (k-1,)
    ok = np.all(var > 1e-9 * scale, axis=1)
    if k > 2:
        with np.errstate(divide="ignore", invalid="ignore"):
            corr = cov / np.sqrt(var[:, :, None] * var[:, None, :])
        off = ~np.eye(k - 1, dtype=bool)
        ok &= np.all(np.abs(np.where(off, corr, 0.0)) <= max_correlation, axis=(1, 2))
    bounded = np.all(np.isfinite(log_y), axis=1)
    use = ok & bounded
    out = np.full((n_draws, k), np.nan)
    if use.any():
        xtx = np.einsum("rpi,rpj->rij", x[use], x[use])  # (R', k, k)
        xty = np.einsum("rpi,rp->ri", x[use], log_y[use])  # (R', k)
        solved = np.linalg.solve(xtx, xty[:, :, None])[:, :, 0]
        out[use] = coeffs + math.sqrt(p / (p - k)) * (solved - coeffs)
    return PairsDraws(
        coeffs=_frozen(out), n_degenerate=int(np.sum(~ok)), n_unbounded=int(np.sum(ok & ~bounded))
    )


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
    add a pairs bootstrap over settings, each resampled setting drawing one of its own bootstrap
    samples of ``B*`` (:func:`pairs_draws`). The law is only fitted across settings that hold the
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
    resid = log_y - design @ coeffs
    ss_tot = float(np.sum((log_y - log_y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid**2)) / ss_tot if ss_tot > 0 else math.nan
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
        draws = pairs_draws(design, coeffs, cbs_samples, n_draws, np.random.default_rng(seed))
        log_c = draws.coeffs[:, 0] - draws.coeffs[:, 1] * centre  # back from the centred intercept
        coef_samples = _frozen(np.exp(log_c))
        exponent_samples = _frozen(draws.coeffs[:, 1])
        coef_ci, note = ci_from_draws(coef_samples, level, what, draws.unbounded_share)
        exponent_ci, _ = ci_from_draws(exponent_samples, level, what, draws.unbounded_share)
        notes += [note] if note else []
        if exponent_ci is not None and len(x_arr) == MIN_SETTINGS_CI:
            notes.append(f"{what}: interval from {len(x_arr)} settings only, read it as rough")
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

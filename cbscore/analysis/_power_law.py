"""One-variable scaling law ``B* = c·x^alpha`` fitted on log axes (DESIGN.md §1, "Scaling laws")."""

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


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array, dtype=float)
    array.setflags(write=False)
    return array


def check_positive(name: str, values: np.ndarray) -> None:
    """Raise :class:`FitError` unless every value is a positive finite number."""
    bad = ~np.isfinite(values) | (values <= 0)
    if bad.any():
        raise FitError(f"every {name} must be a positive finite number, but got {values[bad][0]!r}")


def draw_settings(
    samples: Sequence[np.ndarray], n_draws: int, rng: np.random.Generator
) -> np.ndarray:
    """(R, P) draws: column ``i`` resamples setting ``i``'s bootstrap samples of ``B*``."""
    columns = []
    for s in samples:
        s = np.asarray(s, dtype=float)
        columns.append(s[rng.integers(0, len(s), size=n_draws)])
    return np.stack(columns, axis=1)


def ci_from_draws(
    draws: np.ndarray, level: float, what: str
) -> tuple[tuple[float, float] | None, str | None]:
    """Percentile interval of finite draws; ``None`` and a reason when too many are not finite.

    A draw is not finite when a setting's resampled ``B*`` was infinite (its ``S_min`` not
    resolved). Dropping up to one tail's worth of such draws cannot move the interval's far end
    past an infinite value unnoticed; beyond that the data do not support an interval.
    """
    finite = np.isfinite(draws)
    share = 1.0 - float(finite.mean())
    if share > (1.0 - level) / 2.0:
        return None, f"{what}: no interval, {share:.0%} of the draws had an unbounded B*"
    return percentile_interval(draws[finite], level), None


@dataclass(frozen=True, kw_only=True, eq=False)
class PowerLawFit:
    """``B* = coef·x^exponent`` across settings, by least squares on log axes.

    The intervals carry each setting's own uncertainty: every draw replaces each setting's
    ``B*`` by one of its bootstrap samples and refits (Zhang et al. 2025, §4, fit the law to
    point estimates; the draws add the bootstrap that DESIGN.md §1 asks for).
    """

    variable: str
    """``"n"`` (non-embedding parameters) or ``"d"`` (training tokens)."""
    coef: float
    """``c`` (sequences per ``x^exponent``)."""
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
    """(R,) ``c`` of every draw (``nan`` where a draw was not finite)."""
    exponent_samples: np.ndarray | None
    """(R,) ``alpha`` of every draw."""
    notes: tuple[str, ...] = ()
    """Why an interval is missing, if one is."""

    @property
    def model(self):
        """The model ``f(x, coef, exponent)``."""
        return power_law

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
            cbs=float(self(x)), cbs_ci=ci, n_params=n_params, tokens=tokens, law=self.variable
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
) -> PowerLawFit:
    """Fit ``log B* = log c + alpha·log x`` across settings.

    Args:
        x: the variable (``N`` or ``D``) at each setting.
        cbs: ``B*`` at each setting.
        variable: ``"n"`` or ``"d"``.
        settings: names of the settings (for charts); defaults to their positions.
        cbs_samples: each setting's bootstrap samples of ``B*``; without them no intervals.
        n_draws: draws for the intervals.

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
    design = np.stack([np.ones_like(x_arr), np.log(x_arr)], axis=1)  # (P, 2)
    log_y = np.log(y_arr)  # (P,)
    (log_c, exponent), *_ = np.linalg.lstsq(design, log_y, rcond=None)
    resid = log_y - design @ np.array([log_c, exponent])
    ss_tot = float(np.sum((log_y - log_y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid**2)) / ss_tot if ss_tot > 0 else math.nan
    coef_ci = exponent_ci = None
    coef_samples = exponent_samples = None
    notes: list[str] = []
    if cbs_samples is not None:
        rng = np.random.default_rng(seed)
        draws = draw_settings(cbs_samples, n_draws, rng)  # (R, P)
        with np.errstate(divide="ignore", invalid="ignore"):
            coeffs = np.linalg.pinv(design) @ np.log(draws).T  # (2, R)
        coeffs[:, ~np.all(np.isfinite(draws), axis=1)] = np.nan
        coef_samples = _frozen(np.exp(coeffs[0]))
        exponent_samples = _frozen(coeffs[1])
        coef_ci, note = ci_from_draws(coef_samples, level, f"law in {VARIABLES[variable]}")
        exponent_ci, _ = ci_from_draws(exponent_samples, level, "")
        notes += [note] if note else []
    return PowerLawFit(
        variable=variable,
        coef=float(math.exp(log_c)),
        exponent=float(exponent),
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
    )

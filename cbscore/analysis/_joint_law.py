"""The joint scaling law ``B* = c·N^alpha·D^beta`` (DESIGN.md §1, "Scaling laws")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cbscore.analysis._forecast import Forecast
from cbscore.analysis._interval import LEVEL, percentile_interval
from cbscore.analysis._models import joint_power_law
from cbscore.analysis._power_law import PAPER_UNITS, SharedDraws, check_positive, ci_from_draws, law_draws
from cbscore.errors import FitError

#: Fewest settings for three parameters with at least one residual degree of freedom.
MIN_SETTINGS = 4
#: Fewest settings behind an interval: two residual degrees of freedom for the scatter beyond the
#: draws (with one, as from 4 settings, its estimate is too rough to carry three parameters).
MIN_SETTINGS_CI = 5
#: |corr(log N, log D)| above this leaves alpha and beta unidentifiable (Chinchilla: D ≈ 20·N).
MAX_CORRELATION = 0.999


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array, dtype=float)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, kw_only=True, eq=False)
class JointPowerLawFit:
    """``B* = coef·N^exponent_n·D^exponent_d``, by least squares on log axes.

    Fitted only where ``N`` and ``D`` vary independently across settings (DESIGN.md §1). Intervals
    and draws come from the random-effects meta-regression of :class:`PowerLawFit`
    (:func:`law_draws`), the Student-t scale set by the fewer degrees of freedom of the two
    exponents; with draws, the point fit is that weighted fit. Both exponents come from the same
    draws, so their difference (the verdict of :func:`compare_with_paper`) is read off them.
    """

    coef: float
    """``c``."""
    exponent_n: float
    """``alpha``, the exponent of ``N`` at fixed ``D``."""
    exponent_d: float
    """``beta``, the exponent of ``D`` at fixed ``N``."""
    coef_ci: tuple[float, float] | None
    """Interval of ``c``; ``None`` without draws or when the draws cannot support one."""
    exponent_n_ci: tuple[float, float] | None
    """Interval of ``alpha``."""
    exponent_d_ci: tuple[float, float] | None
    """Interval of ``beta``."""
    n_params: tuple[float, ...]
    """``N`` at each setting."""
    tokens: tuple[float, ...]
    """``D`` at each setting."""
    cbs: tuple[float, ...]
    """``B*`` at each setting."""
    settings: tuple[str, ...]
    """Names of the settings."""
    r2: float
    """Coefficient of determination on log axes."""
    level: float
    """Two-sided level of the intervals."""
    samples: np.ndarray | None
    """(R, 3) ``(log c, alpha, beta)`` of every draw (``nan`` rows where a draw was not finite)."""
    notes: tuple[str, ...] = ()
    """Why an interval is missing, if one is."""

    @property
    def model(self):
        """The model ``f((N, D), coef, exponent_n, exponent_d)``."""
        return joint_power_law

    @property
    def paper_units(self) -> str:
        """The units of :attr:`coef_paper_units`."""
        return "B* = c·N^alpha·D^beta, N in millions, D in billions, B* in sequences"

    @property
    def coef_paper_units(self) -> float:
        """``c`` with ``N`` in millions and ``D`` in billions (Zhang et al. 2025, §4 units):
        ``c·(10⁶)^alpha·(10⁹)^beta``."""
        return self.coef * PAPER_UNITS["n"] ** self.exponent_n * PAPER_UNITS["d"] ** self.exponent_d

    @property
    def coef_paper_units_ci(self) -> tuple[float, float] | None:
        """Interval of :attr:`coef_paper_units` over the draws."""
        if self.samples is None or self.exponent_n_ci is None:
            return None
        log_values = self.samples @ np.array([1.0, math.log(PAPER_UNITS["n"]), math.log(PAPER_UNITS["d"])])
        return percentile_interval(np.exp(log_values[np.isfinite(log_values)]), self.level)

    def __call__(self, n_params, tokens):
        """``B*`` on the fitted law."""
        return joint_power_law((n_params, tokens), self.coef, self.exponent_n, self.exponent_d)

    def forecast(self, n_params: float, tokens: float) -> Forecast:
        """``B*`` at ``(N, D)`` with the percentile interval of the law's draws."""
        check_positive("n_params", np.array([n_params], dtype=float))
        check_positive("tokens", np.array([tokens], dtype=float))
        ci = None
        if self.samples is not None and self.exponent_n_ci is not None:
            log_values = self.samples @ np.array([1.0, math.log(n_params), math.log(tokens)])
            ci = percentile_interval(np.exp(log_values[np.isfinite(log_values)]), self.level)
        return Forecast(
            cbs=float(self(n_params, tokens)), cbs_ci=ci, n_params=float(n_params),
            tokens=float(tokens), law="joint",
        )


def fit_joint_power_law(
    n_params: Sequence[float],
    tokens: Sequence[float],
    cbs: Sequence[float],
    *,
    settings: Sequence[str] | None = None,
    cbs_samples: Sequence[np.ndarray] | None = None,
    n_draws: int = 1000,
    seed: object = 0,
    level: float = LEVEL,
    shared: SharedDraws | None = None,
) -> JointPowerLawFit:
    """Fit ``log B* = log c + alpha·log N + beta·log D`` across settings.

    ``shared``: the random numbers of the draws, one row per setting (see :func:`fit_power_law`).

    Raises:
        FitError: fewer than :data:`MIN_SETTINGS` settings, ``N`` or ``D`` that does not vary,
            ``N`` and ``D`` that vary together (as in a Chinchilla study, where only their
            product's law is identifiable), or a non-positive / non-finite value.
    """
    n_arr = np.asarray(n_params, dtype=float)
    d_arr = np.asarray(tokens, dtype=float)
    y_arr = np.asarray(cbs, dtype=float)
    if not (n_arr.shape == d_arr.shape == y_arr.shape) or n_arr.ndim != 1:
        raise FitError("N, D and B* must be three lists of the same length")
    if len(y_arr) < MIN_SETTINGS:
        raise FitError(f"fewer than {MIN_SETTINGS} settings for the joint law (got {len(y_arr)})")
    check_positive("n_params", n_arr)
    check_positive("tokens", d_arr)
    check_positive("B*", y_arr)
    for name, arr in (("n_params", n_arr), ("tokens", d_arr)):
        if len(np.unique(arr)) < 2:
            raise FitError(f"the joint law needs {name} to vary across settings (got one value)")
    log_n, log_d = np.log(n_arr), np.log(d_arr)
    corr = float(np.corrcoef(log_n, log_d)[0, 1])
    if abs(corr) > MAX_CORRELATION:
        raise FitError(
            f"N and D vary together across settings (correlation of their logs {corr:.4f}): "
            "the joint law cannot separate their exponents"
        )
    # Centred logs keep the normal equations of every draw well conditioned.
    centre = np.array([log_n.mean(), log_d.mean()])  # (2,)
    design = np.stack([np.ones_like(log_n), log_n - centre[0], log_d - centre[1]], axis=1)  # (P, 3)
    log_y = np.log(y_arr)
    coeffs, *_ = np.linalg.lstsq(design, log_y, rcond=None)  # (3,)
    ss_tot = float(np.sum((log_y - log_y.mean()) ** 2))
    cis: list[tuple[float, float] | None] = [None, None, None]
    samples = None
    notes: list[str] = []
    if cbs_samples is not None and len(y_arr) < MIN_SETTINGS_CI:
        notes.append(
            f"joint law: no interval from {len(y_arr)} settings (an interval needs at least {MIN_SETTINGS_CI})"
        )
    elif cbs_samples is not None:
        if shared is None:
            shared = SharedDraws.draw(len(y_arr), n_draws, np.random.default_rng(seed))
        draws = law_draws(design, log_y, cbs_samples, shared, dof_columns=(1, 2))
        coeffs = draws.coeffs  # the random-effects fit
        draw_coeffs = np.array(draws.samples)  # (R, 3): log c at the centre, alpha, beta
        draw_coeffs[:, 0] -= draw_coeffs[:, 1:] @ centre
        samples = _frozen(draw_coeffs)
        for i in range(3):
            column = np.exp(draw_coeffs[:, i]) if i == 0 else draw_coeffs[:, i]
            cis[i], note = ci_from_draws(column, level, "joint law", draws.unbounded_share)
            if note and not notes:
                notes.append(note)
    resid = log_y - design @ coeffs
    r2 = 1.0 - float(np.sum(resid**2)) / ss_tot if ss_tot > 0 else math.nan
    coeffs = np.array([coeffs[0] - coeffs[1:] @ centre, coeffs[1], coeffs[2]])
    return JointPowerLawFit(
        coef=float(math.exp(coeffs[0])),
        exponent_n=float(coeffs[1]),
        exponent_d=float(coeffs[2]),
        coef_ci=cis[0],
        exponent_n_ci=cis[1],
        exponent_d_ci=cis[2],
        n_params=tuple(float(v) for v in n_arr),
        tokens=tuple(float(v) for v in d_arr),
        cbs=tuple(float(v) for v in y_arr),
        settings=tuple(settings) if settings is not None else tuple(str(i) for i in range(len(y_arr))),
        r2=r2,
        level=level,
        samples=samples,
        notes=tuple(notes),
    )

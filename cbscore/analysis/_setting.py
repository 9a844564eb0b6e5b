"""Everything measured and fitted for one setting ``(N, D)``: the object charts draw from."""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from cbscore.analysis._bootstrap import BootstrapResult, bootstrap_steps_fit
from cbscore.analysis._cbs import DEFAULT_B_REF, DEFAULT_OVERHEAD, cbs_empirical, check_cbs_settings
from cbscore.analysis._points import MeasuredPoint, measure_points
from cbscore.analysis._sensitivity import SENSITIVITY_OVERHEADS, SensitivityRow, sensitivity_table
from cbscore.analysis._steps_fit import StepsFit, fit_steps
from cbscore.analysis._trial import TrialSteps
from cbscore.errors import FitError


@dataclass(frozen=True, kw_only=True, eq=False)
class SettingAnalysis:
    """One setting: measured points, the fit, ``B*`` (fitted, interval, empirical), sensitivity.

    Anything the data cannot support is ``None``, with the reason in :attr:`errors`.
    """

    setting: str
    """Name of the setting."""
    n_params: float | None
    """Non-embedding parameters ``N``, when known."""
    tokens: float | None
    """Training tokens ``D``, when known."""
    context: int | None
    """Context length ``T`` in tokens, when known."""
    overhead: float
    """``r`` of :attr:`cbs`."""
    b_ref: float
    """``B_ref`` of :attr:`cbs` (sequences)."""
    points: tuple[MeasuredPoint, ...]
    """Every batch size measured, ascending, including those where no trial reached."""
    fit: StepsFit | None
    """``S(B) = a + b/B`` on ``log S``; ``None`` when refused."""
    fit_free: StepsFit | None
    """``S(B) = a + b·B^-alpha`` when asked for and supported, reported beside."""
    cbs: float | None
    """Fitted ``B* = (1 + r)·B_ref + r·B_noise`` (sequences)."""
    cbs_ci: tuple[float, float] | None
    """Bootstrap interval of :attr:`cbs` (an end may be ``inf``); ``None`` without a bootstrap."""
    cbs_empirical: float | None
    """``B*`` read off the measured points on log–log axes."""
    cbs_free: float | None
    """``B*`` on the free-exponent curve."""
    bootstrap: BootstrapResult | None
    """The bootstrap samples (the scaling laws draw from ``bootstrap.cbs_samples``)."""
    sensitivity: tuple[SensitivityRow, ...]
    """``B*`` over ``r`` in (0.1, 0.2, 0.3, 0.5) and ``B_ref`` over the measured batch sizes."""
    errors: tuple[str, ...]
    """Refusals and notes, each starting ``setting '<name>': ``."""
    skipped: tuple[int, ...] = ()
    """Batch sizes the planner never ran for this setting (given by the caller), ascending."""

    @property
    def measured(self) -> tuple[MeasuredPoint, ...]:
        """The points with a measured ``S(B)`` (the ones fitted)."""
        return tuple(p for p in self.points if p.steps is not None)

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """Batch sizes with a measured ``S(B)``, ascending."""
        return tuple(p.batch_size for p in self.measured)

    @property
    def steps(self) -> tuple[float, ...]:
        """Measured ``S(B)`` at :attr:`batch_sizes`."""
        return tuple(p.steps for p in self.measured)

    @property
    def lower_bounds(self) -> tuple[tuple[int, float], ...]:
        """``(B, steps)`` of every batch size where nothing reached and the censored trials give
        ``S(B) > steps`` (DESIGN.md §1: a cell censored at its cap is a lower bound)."""
        return tuple(
            (p.batch_size, p.steps_lower_bound) for p in self.points if p.steps_lower_bound is not None
        )

    @property
    def s_min(self) -> float | None:
        """Fitted ``S_min``."""
        return None if self.fit is None else self.fit.s_min

    @property
    def b_noise(self) -> float | None:
        """Fitted ``B_noise`` (sequences)."""
        return None if self.fit is None else self.fit.b_noise

    @property
    def r2(self) -> float | None:
        """R² of the log fit."""
        return None if self.fit is None else self.fit.r2

    @property
    def extrapolated(self) -> bool:
        """Whether the fitted ``B*`` lies above the largest measured batch size."""
        return self.cbs is not None and bool(self.batch_sizes) and self.cbs > max(self.batch_sizes)

    def to_json_dict(self) -> dict:
        """This setting's entry of the ``cbs fit --json`` object."""
        # An unbounded end (S_min not resolved in enough resamples) is null; errors says why.
        ci = None if self.cbs_ci is None else [json_number(v) for v in self.cbs_ci]
        return {
            "setting": self.setting,
            "n_params": json_number(self.n_params),
            "tokens": json_number(self.tokens),
            "batch_sizes": [int(b) for b in self.batch_sizes],
            "steps": [json_number(s) for s in self.steps],
            "s_min": json_number(self.s_min),
            "b_noise": json_number(self.b_noise),
            "cbs": json_number(self.cbs),
            "cbs_ci": ci,
            "cbs_empirical": json_number(self.cbs_empirical),
            "r2": json_number(self.r2),
            "lower_bounds": [
                {"batch_size": int(b), "steps_at_least": json_number(v)} for b, v in self.lower_bounds
            ],
            "skipped": [int(b) for b in self.skipped],
        }


def json_number(value: float | None) -> float | int | None:
    """A JSON number: ``None`` for missing or non-finite, an ``int`` for integral values."""
    if value is None or not math.isfinite(value):
        return None
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def setting_seed(seed: int, setting: str) -> list[int]:
    """A per-setting seed: adding or removing another setting never changes this one's samples."""
    return [int(seed), zlib.crc32(setting.encode("utf-8"))]


def analyze_setting(
    setting: str,
    trials: Iterable[TrialSteps],
    *,
    n_params: float | None = None,
    tokens: float | None = None,
    context: int | None = None,
    b_ref: float = DEFAULT_B_REF,
    overhead: float = DEFAULT_OVERHEAD,
    free_alpha: bool = False,
    bootstrap: int = 1000,
    seed: int = 0,
    skipped: Iterable[int] = (),
) -> SettingAnalysis:
    """Measure, fit and bootstrap one setting; refusals become sentences in ``errors``.

    ``bootstrap = 0`` skips the bootstrap (no intervals). The free-exponent fit, when asked for,
    never changes the paper-model results and its refusal is only a note. A batch size where
    nothing reached is named in the notes, with its lower bound where censored trials give one
    (DESIGN.md §1: never silently dropped); so are ``skipped`` batch sizes (never run).
    """
    check_cbs_settings(overhead, b_ref)
    prefix = f"setting {setting!r}: "
    errors: list[str] = []
    points = measure_points(trials)
    for p in points:
        if p.steps is None:
            bound = (
                f"; censored at ≥ {p.steps_lower_bound:,.0f} steps, a lower bound"
                if p.steps_lower_bound is not None else ""
            )
            errors.append(
                f"{prefix}batch size {p.batch_size}: no trial reached the target "
                f"({p.n_censored} censored, {p.n_diverged} diverged, {p.n_other} other){bound}; "
                "left out of the fit"
            )
        elif p.n_seeds_unreached:
            errors.append(
                f"{prefix}batch size {p.batch_size}: S(B) comes from the {p.n_seeds} seed(s) that reached "
                f"the target; {p.n_seeds_unreached} seed(s) did not and are left out"
            )
    measured_sizes = {p.batch_size for p in points}
    skipped = tuple(sorted({int(b) for b in skipped} - measured_sizes))
    for b in skipped:
        errors.append(f"{prefix}batch size {b}: skipped by the planner (never run); not measured")
    measured = [p for p in points if p.steps is not None]
    fit = fit_free = boot = None
    cbs = cbs_ci = empirical = cbs_free = None
    sensitivity: tuple[SensitivityRow, ...] = ()
    try:
        fit = fit_steps([p.batch_size for p in measured], [p.steps for p in measured])
    except FitError as exc:
        errors.append(f"{prefix}{exc}")
    if fit is not None:
        cbs = fit.cbs(overhead, b_ref)
        try:
            empirical = cbs_empirical(fit.batch_sizes, fit.steps, b_ref, overhead)
        except FitError as exc:
            errors.append(f"{prefix}{exc}")
        if bootstrap:
            boot = bootstrap_steps_fit(
                measured, fit, n_resamples=bootstrap, seed=setting_seed(seed, setting),
                overhead=overhead, b_ref=b_ref,
            )
            cbs_ci = boot.cbs_ci
            if not all(math.isfinite(v) for v in cbs_ci):
                errors.append(
                    f"{prefix}the CBS interval has no upper end: S_min fitted to 0 in "
                    f"{boot.n_unresolved} of {boot.n_resamples} resamples; measure larger batch sizes"
                )
        sensitivity = sensitivity_table(
            fit, [*fit.batch_sizes, b_ref], SENSITIVITY_OVERHEADS + (overhead,), boot
        )
        if free_alpha:
            try:
                fit_free = fit_steps(fit.batch_sizes, fit.steps, free_alpha=True)
                cbs_free = fit_free.cbs(overhead, b_ref)
            except FitError as exc:
                errors.append(f"{prefix}free exponent: {exc}")
    return SettingAnalysis(
        setting=setting,
        n_params=n_params,
        tokens=tokens,
        context=context,
        overhead=float(overhead),
        b_ref=float(b_ref),
        points=points,
        fit=fit,
        fit_free=fit_free,
        cbs=cbs,
        cbs_ci=cbs_ci,
        cbs_empirical=empirical,
        cbs_free=cbs_free,
        bootstrap=boot,
        sensitivity=sensitivity,
        errors=tuple(errors),
        skipped=skipped,
    )

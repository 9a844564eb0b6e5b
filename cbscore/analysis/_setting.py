"""Everything measured and fitted for one setting ``(N, D)``: the object charts draw from."""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from cbscore.analysis._bootstrap import BootstrapResult, bootstrap_steps_fit
from cbscore.analysis._cbs import DEFAULT_B_REF, DEFAULT_OVERHEAD, cbs_empirical, check_cbs_settings
from cbscore.analysis._interval import percentile_interval
from cbscore.analysis._points import DEFAULT_ESTIMATOR, MeasuredPoint, RateFit, edge_phrase, measure_points, rate_fit
from cbscore.analysis._seeds import SeedTable
from cbscore.analysis._sensitivity import SENSITIVITY_OVERHEADS, SensitivityRow, sensitivity_table
from cbscore.analysis._shape import DoublingRatio, LackOfFit, doubling_ratios, knee, lack_of_fit
from cbscore.analysis._steps_fit import MIN_BATCH_SIZES, StepsFit, fit_steps
from cbscore.analysis._target import EvalHistory, ReferenceTarget, reference_target, retarget, target_draws
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
    fit_without_ref: StepsFit | None = None
    """The same fit with the reference point ``B_ref`` left out (DESIGN.md §1: the target comes
    from the reference cell, so its point is the one to check); ``None`` when ``B_ref`` was not
    measured or fewer than 3 batch sizes remain."""
    cbs_without_ref: float | None = None
    """``B*`` of :attr:`fit_without_ref` (closed form: it needs no ``S(B_ref)``)."""
    cbs_without_ref_ci: tuple[float, float] | None = None
    """Bootstrap interval of :attr:`cbs_without_ref`."""
    b_noise_without_ref_ci: tuple[float, float] | None = None
    """Bootstrap interval of ``B_noise`` without the reference point."""
    cbs_empirical_ci: tuple[float, float] | None = None
    """Bootstrap interval of :attr:`cbs_empirical` (read off each resample's points)."""
    target: ReferenceTarget | None = None
    """The target rebuilt from the reference runs' evaluation histories, when they were given."""
    lr_edge_batch_sizes: tuple[int, ...] = ()
    """Batch sizes whose best learning rate sits at an edge of the grid (the optimum may lie
    beyond it), ascending."""
    bootstrap_without_ref: BootstrapResult | None = None
    """The bootstrap of :attr:`fit_without_ref` (its draws feed the laws without the reference point)."""
    seed_table: SeedTable | None = None
    """``ln S`` per seed and batch size with its two-way fit (seed-common shift, seed × cell noise)."""
    doublings: tuple[DoublingRatio, ...] = ()
    """Seed-paired ``S(B)/S(2B)`` of every doubling measured (DESIGN.md §1, "Shape before slope")."""
    lack_of_fit: LackOfFit | None = None
    """F test of ``S_min(1 + B_noise/B)`` against the seed × cell noise; ``None`` with one seed."""
    rate_fit: RateFit | None = None
    """The shared learning-rate curvature and the rate-level residuals about it."""
    knee: float | None = None
    """Where doubling stops paying: the batch size whose doubling costs a third more tokens to target
    (:func:`cbscore.analysis._shape.knee`: ``B_noise/2`` on the fitted form, read without it; ``inf``
    past the grid, ``None`` below it)."""
    knee_samples: np.ndarray | None = None
    """(R,) :attr:`knee` of every bootstrap resample (``nan`` below the grid, ``inf`` past it)."""

    @property
    def knee_ci(self) -> tuple[float, float] | None:
        """Percentile interval of :attr:`knee` over the resamples (``None`` without them)."""
        if self.knee_samples is None or not np.isfinite(self.knee_samples).any():
            return None
        return percentile_interval(self.knee_samples, self.bootstrap.level, self.bootstrap.dof)

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
    def b_noise_ci(self) -> tuple[float, float] | None:
        """Bootstrap interval of :attr:`b_noise`."""
        return None if self.bootstrap is None else self.bootstrap.b_noise_ci

    @property
    def b_noise_without_ref(self) -> float | None:
        """``B_noise`` with the reference point left out."""
        return None if self.fit_without_ref is None else self.fit_without_ref.b_noise

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
            # The paper's minimum over learning rates beside S(B), and how S(B) was read per cell.
            "steps_min": [json_number(p.steps_min) for p in self.measured],
            "estimators": [p.estimator for p in self.measured],
            "lr_best": [json_number(p.lr_best) for p in self.measured],
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
            "b_noise_ci": _ci(self.b_noise_ci),
            "cbs_empirical_ci": _ci(self.cbs_empirical_ci),
            "without_ref": {
                "b_noise": json_number(self.b_noise_without_ref),
                "b_noise_ci": _ci(self.b_noise_without_ref_ci),
                "cbs": json_number(self.cbs_without_ref),
                "cbs_ci": _ci(self.cbs_without_ref_ci),
            },
            "target_redrawn": bool(self.bootstrap is not None and self.bootstrap.target_redrawn),
            "lr_at_edge": [int(b) for b in self.lr_edge_batch_sizes],
            "interval_dof": None if self.bootstrap is None else int(self.bootstrap.dof),
            "n_seeds": 0 if self.seed_table is None else self.seed_table.n_seeds,
            "doublings": [
                {"batch_size": d.batch_size, "batch_size_doubled": d.batch_size_doubled, "place": d.place,
                 "ratio": json_number(d.ratio), "ratio_ci": _ci(None if d.ci is None else tuple(math.exp(v) for v in d.ci)),
                 "above_two": d.above_two, "seeds": len(d.seeds)}
                for d in self.doublings
            ],
            "knee": json_number(self.knee),
            "knee_ci": _ci(self.knee_ci),
            "lack_of_fit": None if self.lack_of_fit is None else {
                "f": json_number(self.lack_of_fit.f), "dof": [self.lack_of_fit.dof_fit, self.lack_of_fit.dof_noise],
                "p_value": json_number(self.lack_of_fit.p_value),
            },
        }


def _ci(ci: tuple[float, float] | None) -> list | None:
    return None if ci is None else [json_number(v) for v in ci]


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
    histories: Sequence[EvalHistory] | None = None,
    estimator: str = DEFAULT_ESTIMATOR,
) -> SettingAnalysis:
    """Measure, fit and bootstrap one setting; refusals become sentences in ``errors``.

    ``estimator`` reads each cell's ``S(B)`` off its learning rates (:func:`measure_points`:
    ``"fit"``, the default, or the paper's ``"min"``, always reported beside as ``steps_min``).

    ``bootstrap = 0`` skips the bootstrap (no intervals). The free-exponent fit, when asked for,
    never changes the paper-model results and its refusal is only a note. A batch size where
    nothing reached is named in the notes, with its lower bound where censored trials give one
    (DESIGN.md §1: never silently dropped); so are ``skipped`` batch sizes (never run).

    ``histories`` (every trial's evaluations, the reference cell's marked ``role="reference"``;
    needs ``tokens`` and ``context``) let the bootstrap redraw the target
    (:func:`cbscore.analysis.target_draws`) and recompute every crossing from them, so the
    target's own error moves the cells together inside the intervals (DESIGN.md §1, "Intervals").
    Without them the bootstrap holds the target fixed (``bootstrap.target_redrawn`` is false;
    :func:`analyze_table` says so in one note).

    The fit is also reported without the reference point (:attr:`SettingAnalysis.fit_without_ref`):
    the target comes from the reference cell, so a reference cell that ran fast or slow shows as a
    gap between the two.
    """
    check_cbs_settings(overhead, b_ref)
    prefix = f"setting {setting!r}: "
    errors: list[str] = []
    trials = list(trials)
    points = measure_points(trials, estimator=estimator)
    for p in points:
        if p.steps is None:
            bound = (
                f"; censored at ≥ {p.steps_lower_bound:,.0f} steps, a lower bound"
                if p.steps_lower_bound is not None else ""
            )
            errors.append(
                f"{prefix}batch size {p.batch_size}: no trial reached the target "
                f"({p.n_censored} censored, {p.n_diverged} diverged, {p.n_other} other){bound}; "
                + ("kept in the fit as a lower bound" if p.steps_lower_bound is not None else "left out of the fit")
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
    at_edge = [p for p in points if getattr(p, "lr_at_edge", False)]
    edges = tuple(p.batch_size for p in at_edge)
    if at_edge:
        errors.append(
            f"{prefix}the best learning rate sits at an edge of the grid at batch size(s) "
            f"{', '.join(edge_phrase(p) for p in at_edge)}: the optimum may lie beyond it, "
            "and S(B) may be too high there (extend the rates past that edge)"
        )
    measured = [p for p in points if p.steps is not None]
    table = SeedTable.from_points(points) if measured else None
    doublings = doubling_ratios(table, b_ref) if table is not None else ()
    for d in doublings:
        if d.ci is not None and d.ci[0] > math.log(2.0):
            errors.append(
                f"{prefix}S({d.batch_size})/S({d.batch_size_doubled}) = {d.ratio:.3g} [{math.exp(d.ci[0]):.3g}, "
                f"{math.exp(d.ci[1]):.3g}]: steps more than halve when the batch doubles, which S_min(1 + B_noise/B) "
                "cannot do (its ratio lies below 2)"
            )
    without = [p for p in measured if p.batch_size != b_ref]
    fit_wo = boot_wo = cbs_wo = None
    empirical_ci = None
    target, shifts = None, None
    fit = fit_free = boot = None
    cbs = cbs_ci = empirical = cbs_free = None
    sensitivity: tuple[SensitivityRow, ...] = ()
    # Censored cells stay in the fit as lower bounds (a censored likelihood, DESIGN.md §1).
    bounds = [(p.batch_size, p.steps_lower_bound) for p in points if p.steps_lower_bound is not None]
    try:
        fit = fit_steps([p.batch_size for p in measured], [p.steps for p in measured], lower_bounds=bounds)
    except FitError as exc:
        errors.append(f"{prefix}{exc}")
    if fit is not None and fit.censored_fit:
        errors.append(
            f"{prefix}the least-squares curve fell below the lower bound(s) at B = "
            f"{', '.join(str(b) for b, _ in bounds)}; the fit is the censored likelihood's (the bootstrap "
            "resamples the measured points only)"
        )
    lof = None
    if fit is not None:
        cbs = fit.cbs(overhead, b_ref)
        lof = lack_of_fit(table, fit.residuals) if table is not None else None
        if lof is not None and lof.rejected:
            errors.append(
                f"{prefix}S_min(1 + B_noise/B) misses the points by more than the seeds' noise (lack-of-fit "
                f"F = {lof.f:.3g} on {lof.dof_fit} and {lof.dof_noise} dof, p = {lof.p_value:.2g}): read B* with the "
                "doubling ratios beside it"
            )
        try:
            empirical = cbs_empirical(fit.batch_sizes, fit.steps, b_ref, overhead)
        except FitError as exc:
            errors.append(f"{prefix}{exc}")
        if len(without) < len(measured) and len({p.batch_size for p in without}) >= MIN_BATCH_SIZES:
            try:
                fit_wo = fit_steps([p.batch_size for p in without], [p.steps for p in without])
                cbs_wo = fit_wo.cbs(overhead, b_ref)
            except FitError as exc:
                errors.append(f"{prefix}without the reference point: {exc}")
        if bootstrap and histories is not None:
            try:
                target, shifts = _target_shifts(
                    histories, [p.batch_size for p in measured], tokens, context, bootstrap,
                    np.random.default_rng(setting_seed(seed + 1, setting)), estimator,
                )
            except FitError as exc:
                errors.append(f"{prefix}the bootstrap holds the target fixed: {exc}")
        if bootstrap:
            boot = bootstrap_steps_fit(
                measured, fit, n_resamples=bootstrap, seed=setting_seed(seed, setting),
                overhead=overhead, b_ref=b_ref, log_shifts=shifts,
            )
            cbs_ci = boot.cbs_ci
            empirical_ci = boot.cbs_empirical_ci() if empirical is not None else None
            if fit_wo is not None:
                keep = np.array([p.batch_size != b_ref for p in measured])
                boot_wo = bootstrap_steps_fit(
                    without, fit_wo, n_resamples=bootstrap, seed=setting_seed(seed, setting),
                    overhead=overhead, b_ref=b_ref, log_shifts=None if shifts is None else shifts[:, keep],
                )
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
        bootstrap_without_ref=boot_wo,
        seed_table=table,
        doublings=doublings,
        lack_of_fit=lof,
        rate_fit=rate_fit(trials) if estimator == "fit" else None,
        knee=None if not measured else knee([p.batch_size for p in measured], [math.log(p.steps) for p in measured]),
        knee_samples=None if boot is None else _knee_samples(boot),
        sensitivity=sensitivity,
        errors=tuple(errors),
        skipped=skipped,
        fit_without_ref=fit_wo,
        cbs_without_ref=cbs_wo,
        cbs_without_ref_ci=None if boot_wo is None else boot_wo.cbs_ci,
        b_noise_without_ref_ci=None if boot_wo is None else boot_wo.b_noise_ci,
        cbs_empirical_ci=empirical_ci,
        target=target,
        lr_edge_batch_sizes=edges,
    )


def _knee_samples(boot: BootstrapResult) -> np.ndarray | None:
    """(R,) the knee of every resample's points (``nan`` where it lies below the grid)."""
    if boot.log_s_samples is None:
        return None
    out = np.empty(boot.log_s_samples.shape[0])
    for i, log_s in enumerate(boot.log_s_samples):
        k = knee(boot.batch_sizes, log_s)
        out[i] = np.nan if k is None else k
    out.setflags(write=False)
    return out


#: Target values at which every crossing is recomputed; each draw is interpolated between them.
TARGET_GRID = 15


def _target_shifts(
    histories: Sequence[EvalHistory], batch_sizes: Sequence[int], tokens: float | None,
    context: int | None, n_draws: int, rng: np.random.Generator, estimator: str = DEFAULT_ESTIMATOR,
) -> tuple[ReferenceTarget, np.ndarray]:
    """The target from the reference histories and ``(R, K)`` changes of ``log S(B)`` at
    ``batch_sizes`` when the target is redrawn (:func:`target_draws`).

    Every trial's crossing is recomputed (:func:`retarget`) and the points measured again
    (:func:`measure_points`) at :data:`TARGET_GRID` quantiles of the draws; a draw between two of
    them is interpolated (``S`` is smooth in the target), one outside takes the nearest.
    """
    refs = [h for h in histories if h.role == "reference"]
    if not refs:
        raise FitError("no reference run among the evaluation histories")
    if not tokens or not context:
        raise FitError("the reference step count D/(B_ref·T) needs the setting's tokens and context")
    b_ref_run = refs[0].batch_size
    target = reference_target(refs, tokens / (b_ref_run * context))
    draws = target_draws(target, n_draws, rng)  # (R,)
    grid = np.unique(np.quantile(draws, np.linspace(0.0, 1.0, TARGET_GRID)))

    def log_steps(value: float) -> np.ndarray:
        points = {p.batch_size: p.steps for p in measure_points((retarget(h, value) for h in histories), estimator=estimator)}
        return np.log([points.get(b) or np.nan for b in batch_sizes])  # (K,)

    base = log_steps(target.value)
    if not np.all(np.isfinite(base)):
        raise FitError("the evaluation histories do not reach the target at every fitted batch size")
    table = np.array([log_steps(v) - base for v in grid])  # (G, K)
    ok = np.all(np.isfinite(table), axis=1)
    if not ok.any():
        raise FitError("no redrawn target is reached at every fitted batch size")
    grid, table = grid[ok], table[ok]
    shifts = np.stack([np.interp(draws, grid, table[:, j]) for j in range(len(batch_sizes))], axis=1)
    return target, shifts

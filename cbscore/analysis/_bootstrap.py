"""Seeded bootstrap of the ``S(B)`` fit: intervals for ``S_min``, ``B_noise`` and ``B*``.

``S(B)`` is a minimum over learning rates, not a mean over repeats, so the learning rates of a
cell are never resampled (that measures how coarse the grid is, and can only raise ``S``).
Where two or more seeds ran, a seed is a cluster across every batch size (DESIGN.md §1,
"Intervals"; :mod:`._seeds`): its common shift is held and the seed × cell residuals of the
two-way table are redrawn. With one seed, each batch size's ``S`` is redrawn by residuals of the
log-space fit. Where the trials' evaluation histories are known, every resample is also shifted
by what a redrawn target does to every crossing (``log_shifts``).

No double counting of the reference seeds (the pages' path, ``cbs study fit``): the target is the
mean over the reference seeds, so its draw moves every crossing, mostly by one common factor that
cancels in ``B_noise`` as a seed's shift does; the reference cell's own seed spread enters only
through its seed × cell residuals at ``B_ref``. The old per-batch-size seed resampling redrew the
reference seeds' common shift at ``B_ref`` alone, on top of the target's draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cbscore.analysis._cbs import (
    DEFAULT_B_REF,
    DEFAULT_OVERHEAD,
    cbs_closed_form,
    cbs_empirical,
    check_cbs_settings,
)
from cbscore.analysis._interval import LEVEL, percentile_interval
from cbscore.analysis._logfit import fit_log_linear
from cbscore.analysis._points import MeasuredPoint
from cbscore.analysis._seeds import SeedTable
from cbscore.analysis._steps_fit import StepsFit
from cbscore.errors import ConfigError, FitError

#: Resamples by default (the issue's 1,000).
DEFAULT_RESAMPLES = 1000
#: How a batch size's ``S(B)`` is redrawn: the fit plus a residual, or its seeds resampled.
RESIDUALS, SEEDS = "residuals", "seeds"


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array, dtype=float)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, kw_only=True, eq=False)
class BootstrapResult:
    """Bootstrap samples of one setting's fit and their percentile intervals.

    ``B_noise`` (and so ``B*``) is ``+inf`` in a resample whose fitted ``S_min`` is 0 (the curve
    still falls like ``1/B`` at the largest batch size); an interval end is ``inf`` when the
    percentile falls among those.
    """

    n_resamples: int
    """Number of resamples."""
    seed: object
    """Seed of the generator (anything :func:`numpy.random.default_rng` takes)."""
    level: float
    """Two-sided level of the intervals (0.95)."""
    dof: int
    """Degrees of freedom of the noise estimate the resamples draw from: the seed table's
    (observed cells − K − seeds + 1) with several seeds, else the fit's (batch sizes − 2). The
    intervals are expanded percentile intervals for it (see :func:`percentile_interval`)."""
    overhead: float
    """``r`` of :attr:`cbs_samples`."""
    b_ref: float
    """``B_ref`` of :attr:`cbs_samples` (sequences)."""
    methods: tuple[str, ...]
    """Per fitted batch size, ascending: ``"seeds"`` (the seed × cell residuals of the setting's
    two-way table redrawn, seeds held as clusters) where the table has a residual degree of
    freedom, else ``"residuals"`` (fitted ``log S`` plus a resampled residual of the fit)."""
    s_min_samples: np.ndarray
    """(R,) ``S_min`` of every resample."""
    b_noise_samples: np.ndarray
    """(R,) ``B_noise`` of every resample (``inf`` where ``S_min`` fitted to 0)."""
    s_min_ci: tuple[float, float]
    """Percentile interval of ``S_min``."""
    b_noise_ci: tuple[float, float]
    """Percentile interval of ``B_noise``."""
    log_s_samples: np.ndarray | None = None
    """(R, K) the resampled ``log S`` at :attr:`batch_sizes` (for the empirical ``B*``)."""
    batch_sizes: tuple[float, ...] = ()
    """Batch sizes of the resampled points, ascending."""
    target_redrawn: bool = False
    """Whether each resample also redrew the target and moved every crossing with it."""

    @property
    def cbs_samples(self) -> np.ndarray:
        """(R,) fitted ``B*`` of every resample at :attr:`overhead` and :attr:`b_ref`."""
        return self.cbs_samples_at(self.overhead, self.b_ref)

    @property
    def cbs_ci(self) -> tuple[float, float]:
        """Percentile interval of ``B*`` at :attr:`overhead` and :attr:`b_ref`."""
        return self.cbs_ci_at(self.overhead, self.b_ref)

    @property
    def n_unresolved(self) -> int:
        """Resamples whose ``S_min`` fitted to 0 (``B_noise = inf``)."""
        return int(np.sum(np.isinf(self.b_noise_samples)))

    def cbs_samples_at(self, overhead: float, b_ref: float) -> np.ndarray:
        """(R,) ``B* = (1 + r)·B_ref + r·B_noise`` of every resample (closed form, DESIGN.md §1)."""
        check_cbs_settings(overhead, b_ref)
        return _frozen(cbs_closed_form(self.b_noise_samples, b_ref, overhead))

    def cbs_ci_at(self, overhead: float, b_ref: float) -> tuple[float, float]:
        """Percentile interval of ``B*`` at any ``r`` and ``B_ref``."""
        return percentile_interval(self.cbs_samples_at(overhead, b_ref), self.level, self.dof)

    def cbs_empirical_samples(self, overhead: float | None = None, b_ref: float | None = None) -> np.ndarray | None:
        """(R,) the empirical ``B*`` read off each resample's points (see :func:`cbs_empirical`):
        ``inf`` where it lies beyond the largest batch size, ``nan`` where a resample cannot give
        one. ``None`` without stored samples."""
        if self.log_s_samples is None:
            return None
        overhead = self.overhead if overhead is None else overhead
        b_ref = self.b_ref if b_ref is None else b_ref
        values = np.empty(self.log_s_samples.shape[0])
        for i, log_s in enumerate(self.log_s_samples):
            try:
                values[i] = cbs_empirical(self.batch_sizes, np.exp(log_s), b_ref, overhead)
            except FitError as exc:
                values[i] = np.inf if "beyond" in str(exc) else np.nan
        return _frozen(values)

    def cbs_empirical_ci(self, overhead: float | None = None, b_ref: float | None = None) -> tuple[float, float] | None:
        """Percentile interval of :meth:`cbs_empirical_samples` (those that cannot give one dropped)."""
        values = self.cbs_empirical_samples(overhead, b_ref)
        if values is None or np.isnan(values).all():
            return None
        return percentile_interval(values, self.level, self.dof)


def bootstrap_steps_fit(
    points: Sequence[MeasuredPoint],
    fit: StepsFit,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: object = 0,
    overhead: float = DEFAULT_OVERHEAD,
    b_ref: float = DEFAULT_B_REF,
    level: float = LEVEL,
    log_shifts: np.ndarray | None = None,
) -> BootstrapResult:
    """Resample one setting's measurements and refit ``S(B) = a + b/B`` on ``log S`` each time.

    Several seeds (a :class:`SeedTable` with a residual degree of freedom): ``ln S[s, B] = μ_B +
    γ_s + ε[s, B]``; each resample draws every observed ``ε`` anew from the table's residuals
    (scaled by ``sqrt(n_obs/dof)``) and sets ``log S(B)`` to the point's value plus the mean of
    its seeds' drawn residuals. The seed-common shift ``γ`` is not redrawn: it multiplies every
    ``S(B)`` alike and cancels in ``B_noise`` (redrawing it per batch size, as independent noise,
    made the interval of a setting whose seeds differ by a large common shift several times too
    wide). Intervals are expanded percentile intervals for the table's own degrees of
    freedom (``(n − 1)(K − 1)`` when complete: 3 for 2 seeds at 4 batch sizes).

    One seed (or none recorded), or seeds whose table leaves fewer residual degrees of freedom than
    the fit's ``K − 2`` (a replicate seed run at a few batch sizes): ``S(B)`` is the fitted value times ``exp(e)``, ``e`` drawn from
    the fit's log residuals, leverage-adjusted and centred (Davison & Hinkley 1997, §6.2.3,
    eq. 6.9), and the interval is expanded for ``K - 2`` degrees of freedom; these residuals mix
    the noise with the curve's misfit. Several learning rates at one seed are one measurement,
    never resampled. All resamples are fitted at once (:mod:`._logfit`).

    Args:
        points: the measured points ``fit`` was fitted to (those with ``steps``), any order.
        fit: the ``alpha = 1`` fit of those points.
        n_resamples: number of resamples (≥ 1).
        seed: seed of the generator; the same seed gives the same samples.
        log_shifts: (R, K) optional change of ``log S`` at every fitted batch size (ascending) in
            each resample when the target is redrawn and every crossing recomputed from the
            trials' evaluation histories (:func:`cbscore.analysis.analyze_setting` builds it):
            added to the resampled ``log S``, so an error in the target moves the cells together.
    """
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ConfigError("bootstrap", n_resamples, "must be a positive integer number of resamples")
    check_cbs_settings(overhead, b_ref)
    if fit.free_alpha:
        raise FitError("the bootstrap refits the paper's model a + b/B; pass the alpha = 1 fit")
    measured = sorted((p for p in points if p.steps is not None), key=lambda p: p.batch_size)
    batch_sizes = np.array([p.batch_size for p in measured], dtype=float)  # (K,)
    if batch_sizes.shape != (len(fit.batch_sizes),) or not np.allclose(batch_sizes, fit.batch_sizes):
        raise FitError("the bootstrap needs the same points the fit was fitted to")
    rng = np.random.default_rng(seed)
    k = len(measured)
    table = SeedTable.from_points(measured)
    log_s = np.empty((n_resamples, k))  # (R, K)
    if table.dof >= max(1, k - 2):
        # Seeds as clusters (where the seed × cell residuals have at least the fit's K − 2 degrees of
        # freedom: a replicate seed run at a few batch sizes leaves only a few, and an interval read
        # off them covered the truth in 80% of simulated studies instead of 95%): each seed's common shift is held (it scales every S(B) alike and
        # leaves B_noise unchanged); the seed × cell residuals are redrawn, and each batch size's
        # log S is its observed seeds' mean, as the point is.
        pool = table.scaled_residuals()  # (n_obs,)
        observed = np.isfinite(table.log_steps)  # (n, K)
        draws = pool[rng.integers(0, pool.size, size=(n_resamples,) + observed.shape)]  # (R, n, K)
        draws = np.where(observed[None], draws, 0.0)
        log_s[:] = np.log([p.steps for p in measured])[None, :] + draws.sum(axis=1) / observed.sum(axis=0)[None, :]
        methods = [SEEDS] * k
        dof = table.dof
    else:
        residuals = _modified_residuals(fit)
        log_fitted = np.log(np.asarray(fit.fitted))  # (K,)
        log_s[:] = log_fitted[None, :] + residuals[rng.integers(0, k, size=(n_resamples, k))]
        methods = [RESIDUALS] * k
        dof = k - 2
    if log_shifts is not None:
        log_shifts = np.asarray(log_shifts, dtype=float)
        if log_shifts.shape != log_s.shape:
            raise FitError(f"log_shifts must have shape {log_s.shape}, but got {log_shifts.shape}")
        log_s = log_s + log_shifts
    a, b = fit_log_linear(1.0 / batch_sizes, log_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        b_noise = np.where(a > 0, b / np.where(a > 0, a, 1.0), np.inf)
    return BootstrapResult(
        n_resamples=int(n_resamples),
        seed=seed,
        level=level,
        dof=dof,
        overhead=float(overhead),
        b_ref=float(b_ref),
        methods=tuple(methods),
        s_min_samples=_frozen(a),
        b_noise_samples=_frozen(b_noise),
        s_min_ci=percentile_interval(a, level, dof),
        b_noise_ci=percentile_interval(b_noise, level, dof),
        log_s_samples=_frozen(log_s),
        batch_sizes=tuple(float(v) for v in batch_sizes),
        target_redrawn=log_shifts is not None,
    )


def _modified_residuals(fit: StepsFit) -> np.ndarray:
    """Log residuals divided by ``sqrt(1 - h_kk)`` and centred (Davison & Hinkley 1997, eq. 6.9).

    ``h_kk`` is the leverage of point ``k`` in the linearised fit (``H = J (JᵀJ)⁻¹ Jᵀ`` with
    ``J`` the (K, 2) Jacobian of ``log S_fit`` in ``(a, b)``): raw residuals are smaller than the
    errors they stand for, most at high-leverage points, and resampling them as they are makes
    intervals too narrow.
    """
    batch_sizes = np.asarray(fit.batch_sizes)
    fitted = np.asarray(fit.fitted)
    jac = np.stack([1.0 / fitted, 1.0 / (batch_sizes * fitted)], axis=1)  # (K, 2)
    q, _ = np.linalg.qr(jac)  # (K, 2)
    leverage = np.minimum(np.sum(q * q, axis=1), 1.0 - 1e-9)  # (K,)
    modified = np.asarray(fit.residuals) / np.sqrt(1.0 - leverage)
    return modified - modified.mean()

"""Shape before slope: is ``S(B) = S_min(1 + B_noise/B)`` the curve the data follow, and which
doublings of ``B`` carry a trend with ``D`` or ``N`` (DESIGN.md §1, "Shape before slope")?

``a + b/B`` is a model. Under it the doubling ratio ``S(B)/S(2B) = (B + B_noise)/(B + B_noise/2)``
lies in (1, 2), and a ``B_noise`` that grows with ``D`` raises *every* ratio. A trend carried by
the first doubling from ``B_ref`` alone is a small-batch effect, not a moving critical batch size;
a ratio above 2 is impossible for the model. Ratios are paired within a seed, so the seed-common
shift of the lab's runs cancels (:mod:`._seeds`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cbscore.analysis._interval import LEVEL, student_t_quantile
from cbscore.analysis._seeds import SeedTable

#: Two batch sizes form a doubling when their ratio is within this of 2 on log axes (a √2 ladder
#: such as 4, 6, 8, 11, 16, 23, 32 pairs 6 with 11 and 11 with 23).
DOUBLING_LOG_TOL = 0.1
#: Where a doubling ``(B, 2B)`` sits against ``B_ref``.
BELOW, FIRST, BEYOND = "below", "first", "beyond"


def doubling_pairs(batch_sizes: Sequence[int]) -> list[tuple[int, int]]:
    """Every ``(B, B')`` of ``batch_sizes`` with ``B'/B`` within :data:`DOUBLING_LOG_TOL` of 2 on
    log axes (the nearest such ``B'`` for each ``B``), ascending."""
    sizes = sorted(set(int(b) for b in batch_sizes))
    out = []
    for b in sizes:
        near = [(abs(math.log(c / b) - math.log(2.0)), c) for c in sizes if c > b]
        near = [x for x in near if x[0] <= DOUBLING_LOG_TOL]
        if near:
            out.append((b, min(near)[1]))
    return out


def place(pair: tuple[int, int], b_ref: float) -> str:
    """:data:`BELOW` ``B_ref``, the :data:`FIRST` doubling from it (``B_ref ≤ B < 2·B_ref``), or
    :data:`BEYOND` it (``B ≥ 2·B_ref``, within the doubling tolerance)."""
    b = pair[0]
    if b < b_ref * (1 - 1e-9):
        return BELOW
    if math.log(b / b_ref) < math.log(2.0) - DOUBLING_LOG_TOL:
        return FIRST
    return BEYOND


@dataclass(frozen=True, kw_only=True)
class DoublingRatio:
    """``ln S(B)/S(B')`` of one setting for a doubling ``B' ≈ 2B``, paired within seeds."""

    batch_size: int
    """``B`` (sequences)."""
    batch_size_doubled: int
    """``B' ≈ 2B`` (sequences)."""
    place: str
    """:data:`BELOW`, :data:`FIRST` or :data:`BEYOND` (against ``B_ref``)."""
    log_ratio: float
    """Mean over the seeds measured at both of ``ln S_s(B) − ln S_s(B')``."""
    ci: tuple[float, float] | None
    """95% t-interval of :attr:`log_ratio` from the seed table's seed × cell variance and degrees
    of freedom; ``None`` with one seed."""
    seeds: tuple
    """The seeds paired here."""
    per_seed: tuple[float, ...]
    """Each seed's ``ln S_s(B) − ln S_s(B')``, in :attr:`seeds` order."""

    @property
    def ratio(self) -> float:
        """``S(B)/S(B')`` (geometric mean over seeds)."""
        return math.exp(self.log_ratio)

    @property
    def above_two(self) -> bool:
        """Whether the ratio exceeds 2: impossible for ``S_min(1 + B_noise/B)`` (steps more than
        halve when the batch doubles)."""
        return self.log_ratio > math.log(2.0)


def doubling_ratios(table: SeedTable, b_ref: float, level: float = LEVEL) -> tuple[DoublingRatio, ...]:
    """Every doubling of one setting (:func:`doubling_pairs`), paired within seeds.

    The interval is ``mean ± t_dof·sqrt(2σ²/m)`` with ``σ²`` the table's seed × cell variance
    (pooled over its batch sizes, :attr:`SeedTable.cell_variance`), ``m`` the seeds paired and
    ``dof`` the table's: the two cells of a pair carry independent noise, the common shift cancels.
    """
    out = []
    var = table.cell_variance
    for b, b2 in doubling_pairs(table.batch_sizes):
        i, j = table.column(b), table.column(b2)
        both = np.isfinite(table.log_steps[:, i]) & np.isfinite(table.log_steps[:, j])
        if not both.any():
            continue
        diffs = table.log_steps[both, i] - table.log_steps[both, j]  # (m,)
        mean = float(diffs.mean())
        ci = None
        if var is not None:
            half = student_t_quantile(1 - (1 - level) / 2, table.dof) * math.sqrt(2 * var / diffs.size)
            ci = (mean - half, mean + half)
        seeds = tuple(s for s, k in zip(table.seeds, both) if k)
        out.append(DoublingRatio(batch_size=b, batch_size_doubled=b2, place=place((b, b2), b_ref),
                                 log_ratio=mean, ci=ci, seeds=seeds, per_seed=tuple(float(d) for d in diffs)))
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class LackOfFit:
    """The lack-of-fit F test of ``S_min(1 + B_noise/B)`` against the seed × cell noise (pure
    error from replicates; Draper & Smith 1998, *Applied Regression Analysis*, §2.1)."""

    f: float
    """``(Σ_B m_B·r_B² / (K − 2)) / σ²``: ``r_B`` the fit's log residual, ``m_B`` the seeds at ``B``."""
    dof_fit: int
    """``K − 2``."""
    dof_noise: int
    """The seed table's degrees of freedom."""
    p_value: float
    """``P(F > f)`` under the model: small means the curve misses the points by more than noise."""

    @property
    def rejected(self) -> bool:
        """Whether the model is rejected at 5%."""
        return self.p_value < 0.05


def lack_of_fit(table: SeedTable, log_residuals: Sequence[float]) -> LackOfFit | None:
    """The F test for a fit whose log residuals at :attr:`SeedTable.batch_sizes` are
    ``log_residuals``; ``None`` without a noise estimate (one seed) or a residual dof (K < 3)."""
    var = table.cell_variance
    k = len(table.batch_sizes)
    if var is None or var <= 0 or k < 3:
        return None
    from scipy import stats  # only here: the rest of the package avoids scipy's import time

    m = np.isfinite(table.log_steps).sum(axis=0)  # (K,)
    f = float(np.sum(m * np.asarray(log_residuals) ** 2) / (k - 2) / var)
    return LackOfFit(f=f, dof_fit=k - 2, dof_noise=table.dof, p_value=float(stats.f.sf(f, k - 2, table.dof)))


@dataclass(frozen=True, kw_only=True)
class RatioTrend:
    """The slope of a doubling ratio's ``ln`` across the settings of one law, per e-fold of its
    variable (``D`` or ``N``), with a seed fixed effect."""

    doublings: tuple[tuple[int, int], ...]
    """The doubling(s) pooled (one, or every doubling beyond the first, with a fixed effect each)."""
    place: str
    """:data:`BELOW`, :data:`FIRST` or :data:`BEYOND`."""
    slope: float
    """``d ln(S(B)/S(2B)) / d ln x``."""
    ci: tuple[float, float]
    """95% t-interval of :attr:`slope` on the regression's own degrees of freedom."""
    dof: int
    """Residual degrees of freedom: observations − seeds − (doublings pooled − 1) − covariates − 1."""
    n_settings: int
    """Settings with a measured ratio."""

    @property
    def positive(self) -> bool:
        """The slope is above 0 at 97.5% (one-sided: the interval's lower end)."""
        return self.ci[0] > 0

    @property
    def negative(self) -> bool:
        """The slope is below 0 at 97.5%."""
        return self.ci[1] < 0


def ratio_trend(observations: Sequence[tuple], place_: str, level: float = LEVEL) -> RatioTrend | None:
    """Least squares of ``ln ratio = α_seed + δ_doubling + γ·z + β·ln x`` over ``observations``
    ``(seed, doubling, ln x, ln ratio, z)`` (``z`` a tuple of covariates held fixed, e.g. ``ln N``
    when the settings vary in both; may be empty); ``None`` without two distinct ``x`` or a
    residual degree of freedom."""
    if not observations:
        return None
    seeds = sorted({o[0] for o in observations}, key=repr)
    pairs = sorted({o[1] for o in observations})
    x = np.array([o[2] for o in observations])
    if np.ptp(x) <= 0:
        return None
    n_cov = len(observations[0][4])
    n, p = len(observations), len(seeds) + len(pairs) - 1 + n_cov + 1
    if n - p < 1:
        return None
    design = np.zeros((n, p))
    for r, (seed, pair, lx, _, cov) in enumerate(observations):
        design[r, seeds.index(seed)] = 1.0
        at = pairs.index(pair)
        if at:
            design[r, len(seeds) + at - 1] = 1.0
        design[r, len(seeds) + len(pairs) - 1:-1] = cov
        design[r, -1] = lx
    if np.linalg.matrix_rank(design) < p:
        return None
    y = np.array([o[3] for o in observations])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ coef
    dof = n - p
    sigma2 = float(resid @ resid) / dof
    cov = sigma2 * np.linalg.pinv(design.T @ design)
    half = student_t_quantile(1 - (1 - level) / 2, dof) * math.sqrt(max(cov[-1, -1], 0.0))
    slope = float(coef[-1])
    return RatioTrend(doublings=tuple(pairs), place=place_, slope=slope, ci=(slope - half, slope + half),
                      dof=dof, n_settings=len({o[2] for o in observations}))


def law_ratio_trends(ratios: Sequence[tuple], b_ref: float,
                     level: float = LEVEL) -> tuple[tuple[RatioTrend, ...], RatioTrend | None]:
    """Per doubling, the slope of its ratio across settings ``(x, that setting's ratios[, z])``
    (``z``: covariates held fixed); and the pooled slope of every doubling beyond the first (a
    doubling fixed effect each). Observations are per seed, so the seed fixed effect pairs each
    seed with itself across settings."""
    by_pair: dict[tuple[int, int], list] = {}
    for x, setting_ratios, *rest in ratios:
        cov = tuple(rest[0]) if rest else ()
        for r in setting_ratios:
            pair = (r.batch_size, r.batch_size_doubled)
            for seed, d in zip(r.seeds, r.per_seed):
                by_pair.setdefault(pair, []).append((seed, pair, math.log(x), d, cov))
    trends = []
    for pair in sorted(by_pair):
        t = ratio_trend(by_pair[pair], place(pair, b_ref), level)
        if t is not None:
            trends.append(t)
    beyond = [o for pair, obs in by_pair.items() if place(pair, b_ref) == BEYOND for o in obs]
    return tuple(trends), ratio_trend(beyond, BEYOND, level)


@dataclass(frozen=True, kw_only=True)
class LawShape:
    """Which doublings carry a law's trend: each doubling's slope, and the later ones pooled."""

    variable: str
    """``"n"`` or ``"d"``: the law's variable (the slopes are per e-fold of it)."""
    source: str
    """The law in words (e.g. ``"law in D at fixed N = 9.83e+04, 4 settings"``)."""
    settings: tuple[str, ...]
    """Settings of the law."""
    trends: tuple[RatioTrend, ...]
    """One per doubling measured in enough settings, ascending."""
    beyond: RatioTrend | None
    """Every doubling beyond the first from ``B_ref`` pooled (``None`` where none was measured)."""

    @property
    def first(self) -> RatioTrend | None:
        """The first doubling from ``B_ref``'s trend (the one a small-batch effect moves)."""
        return next((t for t in self.trends if t.place == FIRST), None)

    def sentence(self) -> str:
        """Which doublings carry a trend, in words."""
        unit = "D" if self.variable == "d" else "N"
        parts = []
        for t in self.trends:
            (b, b2), = t.doublings
            mark = " ↑" if t.positive else " ↓" if t.negative else ""
            parts.append(f"ln S({b})/S({b2}) {t.slope:+.3f} [{t.ci[0]:+.3f}, {t.ci[1]:+.3f}]{mark}")
        text = f"per e-fold of {unit} ({self.source}): " + "; ".join(parts)
        if self.beyond is not None:
            text += (f"; beyond the first doubling, pooled: {self.beyond.slope:+.3f} "
                     f"[{self.beyond.ci[0]:+.3f}, {self.beyond.ci[1]:+.3f}]")
        return text


#: The knee's extra-token threshold: a doubling from B costs a third more tokens to target. On
#: S_min(1 + B_noise/B) that happens at B = B_noise/2 exactly (see :func:`knee`), so the knee reads
#: B_noise/2 off the points without the fitted form. Chosen so that it falls inside the lab's grids:
#: the paper's r = 0.2 puts it at B_noise/4 (≈ 3–4 at CPU scale, below B = 4) and r = 0.5 at
#: B_noise itself (≈ 12–16, at the top of a grid whose last doubling starts at 16).
KNEE_OVERHEAD = 1.0 / 3.0


def knee(batch_sizes: Sequence[float], log_steps: Sequence[float], overhead: float = KNEE_OVERHEAD) -> float | None:
    """The batch size where doubling stops paying: the first doubling ``(B, B')`` (ascending) whose
    tokens to target grow by more than ``r_k``, ``E(B')/E(B) = (B'/B)·S(B')/S(B) > 1 + r_k`` (for a
    doubling, ``S(B)/S(2B) < 2/(1 + r_k)``), interpolated on log axes between the smaller batch
    sizes ``B`` of the last doubling that pays and the first that does not. The local counterpart of
    the paper's rule (Zhang et al. 2025, §2.2, which compares with linear scaling from ``B_ref``
    instead). On ``S_min(1 + B_noise/B)`` (McCandlish et al. 2018, eq. 2.11) it sits where
    ``(B + B_n)/(B + B_n/2) = 2/(1 + r_k)``, at ``B = r_k·B_n/(1 − r_k)``: ``B_noise/2`` at
    :data:`KNEE_OVERHEAD` = 1/3, so the knee reads B_noise off the points without the fitted form.

    Returns ``None`` when the first doubling already does not pay (the knee lies below the grid),
    ``inf`` when every doubling pays (above it)."""
    sizes = [float(b) for b in batch_sizes]
    logs = dict(zip(sizes, (float(v) for v in log_steps)))
    points = []  # (ln B, excess): excess = ln(E(B')/E(B)) − ln(1 + r), > 0 where doubling from B stops paying
    for b, b2 in doubling_pairs(sizes):
        excess = math.log(b2 / b) + logs[float(b2)] - logs[float(b)] - math.log1p(overhead)
        points.append((math.log(b), excess))
    if not points or points[0][1] > 0:
        return None
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if y0 <= 0 < y1:
            return math.exp(x0 + (x1 - x0) * (0 - y0) / (y1 - y0))
    return math.inf

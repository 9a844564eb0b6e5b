"""One setting's ``ln S`` per seed and batch size, as a two-way table (DESIGN.md §1, "Intervals").

The lab's seeds share a shift of ``ln S`` across every batch size (measured on the ``reproduce``
study: docs/results/reproduce/README.md, "Noise"), so a seed is a cluster, never a repeat drawn
anew at each ``B``. The additive model

    ln S[s, B] = μ_B + γ_s + ε[s, B]

(a two-way layout without interaction; Scheffé 1959, *The Analysis of Variance*, §4.1) separates
the seed-common shift ``γ_s`` from the seed × cell noise ``ε``. A common shift scales every
``S(B)`` of the setting alike, which leaves ``B_noise = b/a`` and so ``B*`` unchanged: what moves
``B*`` is ``ε`` alone, and its variance is estimated from the table's own residuals with
``n_obs − K − (n − 1)`` degrees of freedom (``(n − 1)(K − 1)`` when complete), not from the
``K − 2`` of the fit, which mix the noise with the curve's misfit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cbscore.analysis._points import MeasuredPoint


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.array(array, dtype=float)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, kw_only=True, eq=False)
class SeedTable:
    """``ln S`` of every seed at every measured batch size of one setting, and its two-way fit."""

    batch_sizes: tuple[int, ...]
    """Measured batch sizes (sequences), ascending: the columns."""
    seeds: tuple
    """Seeds that reached somewhere, in order: the rows."""
    log_steps: np.ndarray
    """(n, K) ``ln S`` of seed ``s`` at batch size ``B`` (its cell's estimate), NaN where that
    seed did not reach."""
    mu: np.ndarray
    """(K,) the batch-size effects ``μ_B`` of the additive fit (NaN without one)."""
    gamma: np.ndarray
    """(n,) the seed-common shifts ``γ_s`` (centred; zeros with one seed)."""
    residuals: np.ndarray
    """(n, K) ``ε[s, B]`` (NaN where missing)."""
    dof: int
    """Residual degrees of freedom of the additive fit: observed cells − K − (n − 1); 0 with one
    seed (no estimate of the seed × cell noise)."""

    @classmethod
    def from_points(cls, points: Sequence[MeasuredPoint]) -> SeedTable:
        """The table of the points with a measured ``S(B)`` (their :attr:`MeasuredPoint.seed_cells`)."""
        measured = sorted((p for p in points if p.steps is not None), key=lambda p: p.batch_size)
        seeds: list = []
        for p in measured:
            for seed, _ in p.seed_cells:
                if seed not in seeds:
                    seeds.append(seed)
        table = np.full((len(seeds), len(measured)), np.nan)  # (n, K)
        for j, p in enumerate(measured):
            for seed, steps in p.seed_cells:  # every measured point has one entry per reached seed
                table[seeds.index(seed), j] = math.log(steps)
        return cls.fit(tuple(p.batch_size for p in measured), tuple(seeds), table)

    @classmethod
    def fit(cls, batch_sizes: tuple[int, ...], seeds: tuple, log_steps: np.ndarray) -> SeedTable:
        """Least squares of the additive model on the observed cells (design (n_obs, K + n − 1):
        one column per batch size, then one per seed but the first; ``γ`` centred after)."""
        n, k = log_steps.shape
        observed = np.argwhere(np.isfinite(log_steps))  # (n_obs, 2) of (seed, batch size)
        dof = len(observed) - k - (n - 1)
        if n < 2 or k == 0 or dof < 1:
            return cls(batch_sizes=batch_sizes, seeds=seeds, log_steps=_frozen(log_steps),
                       mu=_frozen(np.full(k, np.nan)), gamma=_frozen(np.zeros(n)),
                       residuals=_frozen(np.full((n, k), np.nan)), dof=0)
        design = np.zeros((len(observed), k + n - 1))
        design[np.arange(len(observed)), observed[:, 1]] = 1.0
        rows = observed[:, 0] > 0
        design[np.flatnonzero(rows), k + observed[rows, 0] - 1] = 1.0
        y = log_steps[observed[:, 0], observed[:, 1]]
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        gamma = np.concatenate([[0.0], coef[k:]])  # (n,)
        mu = coef[:k] + gamma.mean()
        gamma = gamma - gamma.mean()
        residuals = log_steps - mu[None, :] - gamma[:, None]  # NaN stays NaN
        return cls(batch_sizes=batch_sizes, seeds=seeds, log_steps=_frozen(log_steps), mu=_frozen(mu),
                   gamma=_frozen(gamma), residuals=_frozen(residuals), dof=int(dof))

    @property
    def n_seeds(self) -> int:
        """Seeds (rows)."""
        return len(self.seeds)

    @property
    def residual_ss(self) -> float:
        """Sum of squared residuals of the additive fit (0 without one)."""
        return float(np.nansum(self.residuals ** 2)) if self.dof else 0.0

    @property
    def cell_variance(self) -> float | None:
        """Seed × cell variance of ``ln S`` (``residual_ss / dof``); ``None`` with one seed."""
        return self.residual_ss / self.dof if self.dof else None

    def scaled_residuals(self) -> np.ndarray:
        """(n_obs,) the observed residuals times ``sqrt(n_obs/dof)``, so that drawing from them
        with replacement has the unbiased variance (Davison & Hinkley 1997, §6.2.3)."""
        values = self.residuals[np.isfinite(self.residuals)]
        return values * math.sqrt(values.size / self.dof)

    def column(self, batch_size: int) -> int:
        """Index of ``batch_size`` among :attr:`batch_sizes`."""
        return self.batch_sizes.index(batch_size)

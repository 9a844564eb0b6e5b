"""The noise a study actually has: ``ln S`` split into rate-level, seed × cell and seed-common
parts, and the learning-rate curvature (DESIGN.md §1, "Intervals").

From every setting with two or more seeds:

- **rate-level**: the residuals of ``log S`` about each cell's parabola in ``ln η`` (the fit
  across learning rates, :func:`cbscore.analysis._points.rate_fit`);
- **seed × cell**: the residuals of the additive table ``ln S[s, B] = μ_B + γ_s + ε`` (a cell's
  estimate already averages its rates, so this part includes what rate-level noise leaves there);
- **seed-common**: the variance of ``γ_s`` by the method of moments,
  ``E[MS_seed] = σ²_ε + K·σ²_γ`` for a complete table (Searle, Casella & McCulloch 1992,
  *Variance Components*, §4.3); negative estimates are set to 0.

Sums of squares and degrees of freedom are pooled over settings. These are the components the
simulator's ``--noise lab`` draws and the power analysis uses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cbscore.analysis._points import RateFit
from cbscore.analysis._seeds import SeedTable


@dataclass(frozen=True, kw_only=True)
class NoiseComponents:
    """Standard deviations of ``ln S`` by source, pooled over settings, with their dof."""

    rate_sd: float | None
    """Rate-level: residual sd of ``log S`` about the parabolas across rates (``None`` unfitted)."""
    rate_dof: int
    """Its degrees of freedom."""
    seed_cell_sd: float | None
    """Seed × cell: residual sd of the additive seed table (``None`` without two seeds)."""
    seed_cell_dof: int
    """Its degrees of freedom."""
    seed_common_sd: float | None
    """Seed-common: sd of a seed's shift of ``ln S`` across every batch size of a setting."""
    seed_common_dof: int
    """Degrees of freedom of the seed mean square behind it (settings × (seeds − 1))."""
    curvatures: tuple[float, ...]
    """Each setting's learning-rate curvature ``k`` of ``log S = … + k·ln²(η/η*)``."""
    n_settings: int
    """Settings with two or more seeds (the seed parts come from these)."""

    @property
    def curvature(self) -> float | None:
        """Median of :attr:`curvatures`."""
        return float(np.median(self.curvatures)) if self.curvatures else None

    def to_json_dict(self) -> dict:
        """The ``noise`` entry of ``cbs fit --json``."""
        def num(v):
            return None if v is None or not math.isfinite(v) else float(v)
        return {
            "rate_sd": num(self.rate_sd), "rate_dof": self.rate_dof,
            "seed_cell_sd": num(self.seed_cell_sd), "seed_cell_dof": self.seed_cell_dof,
            "seed_common_sd": num(self.seed_common_sd), "seed_common_dof": self.seed_common_dof,
            "lr_curvature": num(self.curvature), "lr_curvatures": [float(k) for k in self.curvatures],
            "n_settings": self.n_settings,
        }


def noise_components(tables: Sequence[SeedTable], rate_fits: Sequence[RateFit]) -> NoiseComponents:
    """Pool the seed tables (complete batch sizes only, for the seed-common part) and rate fits."""
    rate_ss = sum(r.residual_ss for r in rate_fits)
    rate_dof = sum(r.dof for r in rate_fits)
    cell_ss = cell_dof = 0.0
    seed_ss = seed_dof = seed_k = 0.0
    n_settings = 0
    for table in tables:
        complete = np.all(np.isfinite(table.log_steps), axis=0)  # (K,)
        sub = table.log_steps[:, complete]  # (n, K')
        n, k = sub.shape
        if n < 2 or k < 2:
            continue
        n_settings += 1
        # SeedTable.fit's additive model in closed form: on a complete table its least squares are the
        # row and column means (Scheffé 1959, §4.1).
        mu = sub.mean(axis=0)
        gamma = sub.mean(axis=1) - sub.mean()
        resid = sub - mu[None, :] - gamma[:, None]
        cell_ss += float(np.sum(resid ** 2))
        cell_dof += (n - 1) * (k - 1)
        seed_ss += k * float(np.sum(gamma ** 2))
        seed_dof += n - 1
        seed_k += (n - 1) * k
    cell_var = cell_ss / cell_dof if cell_dof else None
    common = None
    if cell_var is not None and seed_dof:
        common = math.sqrt(max(0.0, (seed_ss - cell_var * seed_dof) / seed_k))
    return NoiseComponents(
        rate_sd=math.sqrt(rate_ss / rate_dof) if rate_dof else None, rate_dof=int(rate_dof),
        seed_cell_sd=None if cell_var is None else math.sqrt(cell_var), seed_cell_dof=int(cell_dof),
        seed_common_sd=common, seed_common_dof=int(seed_dof),
        curvatures=tuple(r.curvature for r in rate_fits if r.curvature is not None),
        n_settings=n_settings,
    )

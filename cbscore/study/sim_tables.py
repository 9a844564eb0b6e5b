"""Steps tables of simulated studies with the lab's own noise and curve shapes.

The planner simulator (:mod:`cbscore.study.simulate`) asks what a *design* finds; this module asks
what the *analysis* concludes from a full grid: every trial of every cell, as the steps table
``cbs fit`` reads, drawn from a known truth with the noise the lab measures. The power analysis
(``benchmarks/power_reproduce.py``) and the coverage tests feed these tables to
:func:`cbscore.analysis.analyze_table` and count how often its intervals cover the truth and how
often its verdict is right.

One trial's steps to target (seed ``s``, batch size ``B``, learning rate ``η``):

    ln S = ln S_true(B) + γ_s + ε[s, B] + k·ln²(η/η*(B)) + e

with ``γ_s`` a seed's shift shared by every batch size of a setting, ``ε`` the seed × cell noise,
``k`` the learning-rate curvature (the parabola of :mod:`cbscore.analysis._points`) and ``e`` the
rate-level noise: the components :func:`cbscore.analysis.noise_components` measures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cbscore.errors import ConfigError
from cbscore.study.sim_truth import rule_cbs


@dataclass(frozen=True, kw_only=True)
class LabNoise:
    """Noise of ``ln S`` by source (standard deviations, natural log units)."""

    seed_common_sd: float = 0.066
    """A seed's shift across every batch size of a setting (measured on ``reproduce``: 0.066 on 6
    dof, docs/results/reproduce/README.md, "Noise")."""
    seed_cell_sd: float = 0.027
    """Seed × cell noise *before* the rate-level noise: with :attr:`rate_sd` on 5 rates it gives
    the 0.034 that ``reproduce``'s seed tables measure (their cells average their rates' noise)."""
    rate_sd: float = 0.030
    """Each trial's own noise about its cell's parabola in ``ln η`` (measured: 0.030 on 106 dof)."""
    lr_curvature: float = 0.198
    """``k`` of ``ln S = … + k·ln²(η/η*)`` (measured: median 0.198 over 6 settings, 0.158-0.218)."""

    def __post_init__(self) -> None:
        for name in ("seed_common_sd", "seed_cell_sd", "rate_sd", "lr_curvature"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigError(name, value, "must be a non-negative number")


#: The lab's measured noise (``cbs fit docs/results/reproduce/steps.csv --b-ref 4``, "noise of ln S").
LAB_NOISE = LabNoise()


@dataclass(frozen=True, kw_only=True)
class TruthShape:
    """A known ``S(B)`` of one setting: ``S_min(1 + B_noise/B)``, times ``exp(q)`` below ``2·B_ref``
    (a small-batch effect on the first doubling, which that form cannot make)."""

    s_min: float
    """``S_min`` (steps)."""
    b_noise: float
    """``B_noise`` (sequences)."""
    small_batch_log: float = 0.0
    """``q``: ``ln S`` added at every ``B < 2·B_ref`` (positive makes the first doubling steeper)."""
    b_ref: float = 4.0
    """``B_ref`` (sequences)."""

    def log_steps(self, batch_size: float) -> float:
        """``ln S(B)``."""
        bump = self.small_batch_log if batch_size < 2 * self.b_ref * (1 - 1e-9) else 0.0
        return math.log(self.s_min * (1.0 + self.b_noise / batch_size)) + bump

    def cbs(self, overhead: float = 0.2) -> float:
        """The truth's ``B*`` by the paper's rule on this curve (:func:`cbscore.study.sim_truth.rule_cbs`;
        the closed form ``(1 + r)·B_ref + r·B_noise`` holds only at ``q = 0``)."""
        return rule_cbs(lambda b: math.exp(self.log_steps(b)), self.b_ref, overhead)


@dataclass(frozen=True, kw_only=True)
class SimSetting:
    """One setting of a simulated table."""

    name: str
    """Setting name."""
    n_params: float
    """``N``."""
    tokens: float
    """``D``."""
    truth: TruthShape
    """Its known curve."""


def simulated_rows(settings: Sequence[SimSetting], batch_sizes: Sequence[int], *, seeds: int = 2,
                   rates: int = 5, noise: LabNoise = LAB_NOISE, rng: np.random.Generator) -> list[dict]:
    """Every trial of a full grid (``rates`` learning rates √2 apart around each cell's optimum,
    the optimum placed at random within half a step of the middle rate), as ``cbs fit`` rows."""
    rows = []
    for setting in settings:
        gamma = noise.seed_common_sd * rng.standard_normal(seeds)  # (seeds,)
        for b in batch_sizes:
            base = setting.truth.log_steps(b)
            for s in range(seeds):
                cell = noise.seed_cell_sd * rng.standard_normal()
                offset = rng.uniform(-0.25, 0.25) * math.log(2.0)  # ln(η*/η_middle)
                for i in range(rates):
                    u = (i - (rates - 1) / 2) * 0.5 * math.log(2.0) - offset  # ln(η/η*)
                    log_s = base + gamma[s] + cell + noise.lr_curvature * u * u + noise.rate_sd * rng.standard_normal()
                    rows.append({
                        "setting": setting.name, "batch_size": int(b), "steps": math.exp(log_s),
                        "n_params": setting.n_params, "tokens": setting.tokens, "outcome": "reached",
                        "seed": s, "lr": 0.01 * b ** 0.5 * math.exp(u + offset),
                    })
    return rows

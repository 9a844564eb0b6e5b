"""Steps-to-target per batch size: the minimum over learning rates, per seed (DESIGN.md §1)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from cbscore.analysis._trial import CENSORED, DIVERGED, REACHED, TrialSteps


@dataclass(frozen=True, kw_only=True)
class MeasuredPoint:
    """``S(B)`` at one batch size, with the trials behind it."""

    batch_size: int
    """Batch size in sequences."""
    steps: float | None
    """``S(B)``: the fewest steps to target over the reached trials (learning rates); with several
    seeds, the geometric mean over seeds of each seed's fewest steps (:attr:`seed_steps`).
    ``None`` if no trial reached."""
    trial_steps: tuple[float, ...]
    """Steps of every reached trial, ascending (shown; never resampled: a minimum over learning
    rates is not a sample of repeats, DESIGN.md §1 "Intervals")."""
    n_trials: int
    """All trials at this batch size, whatever their outcome."""
    n_censored: int
    """Trials that never reached the target within their budget."""
    n_diverged: int
    """Trials whose loss became non-finite or blew up."""
    n_other: int
    """Pruned, stopped, failed or unfinished trials."""
    seed_steps: tuple[float, ...] = ()
    """Where reached trials carry two or more distinct seeds: ``S`` of each such seed (the fewest
    steps over its learning rates), in seed order; the bootstrap resamples these. Empty when one
    seed (or none recorded) reached, and then :attr:`steps` is the minimum over all trials."""
    n_seeds_unreached: int = 0
    """Seeds with trials here none of which reached (left out of the mean over seeds)."""
    steps_lower_bound: float | None = None
    """Where no trial reached but some were censored with a known budget: ``S(B)`` exceeds this,
    the smallest budget (steps) among them, since ``S(B)`` is a minimum and each censored trial's
    ``S`` exceeds its own budget. ``None`` otherwise."""

    @property
    def n_reached(self) -> int:
        """Trials that reached the target (they alone enter ``steps``)."""
        return len(self.trial_steps)

    @property
    def n_seeds(self) -> int:
        """Seeds whose trials reached here (1 when seeds were not recorded but a trial reached)."""
        return len(self.seed_steps) or (1 if self.trial_steps else 0)


def measure_points(trials: Iterable[TrialSteps]) -> tuple[MeasuredPoint, ...]:
    """Group trials by batch size; ``S(B)`` is the minimum over the reached ones of each seed.

    Censored and diverged trials never enter ``S`` (DESIGN.md §1); they are counted, and where
    nothing reached, the censored trials' budgets give :attr:`MeasuredPoint.steps_lower_bound`.
    With several seeds, ``S(B)`` is the geometric mean over seeds of each seed's minimum: the fit
    is on ``log S`` (Zhang et al. 2025, arXiv 2410.21676, §3.1), so that is the mean it would
    see, and a minimum over repeats would be biased low. Points come back sorted by batch size,
    including batch sizes where nothing reached.
    """
    grouped: dict[int, list[TrialSteps]] = {}
    for trial in trials:
        grouped.setdefault(trial.batch_size, []).append(trial)
    points = []
    for batch_size in sorted(grouped):
        group = grouped[batch_size]
        reached = sorted(t.steps for t in group if t.outcome == REACHED)
        by_seed: dict[int | None, list[float]] = {}
        for t in group:
            by_seed.setdefault(t.seed, [])
            if t.outcome == REACHED:
                by_seed[t.seed].append(t.steps)
        seed_min = {s: min(v) for s, v in by_seed.items() if v}
        order = sorted(seed_min, key=lambda s: (s is None, s if s is not None else 0))
        seed_steps = tuple(seed_min[s] for s in order) if len(seed_min) >= 2 else ()
        steps = reached[0] if reached else None
        if seed_steps:
            steps = math.exp(sum(math.log(v) for v in seed_steps) / len(seed_steps))
        n_censored = sum(t.outcome == CENSORED for t in group)
        n_diverged = sum(t.outcome == DIVERGED for t in group)
        budgets = [t.budget_steps for t in group if t.outcome == CENSORED and t.budget_steps is not None]
        points.append(
            MeasuredPoint(
                batch_size=batch_size,
                steps=steps,
                trial_steps=tuple(reached),
                n_trials=len(group),
                n_censored=n_censored,
                n_diverged=n_diverged,
                n_other=len(group) - len(reached) - n_censored - n_diverged,
                seed_steps=seed_steps,
                n_seeds_unreached=sum(1 for v in by_seed.values() if not v) if reached else 0,
                steps_lower_bound=min(budgets) if budgets and not reached else None,
            )
        )
    return tuple(points)

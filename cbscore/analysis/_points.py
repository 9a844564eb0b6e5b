"""Steps-to-target per batch size: the minimum over trials (DESIGN.md §1)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cbscore.analysis._trial import CENSORED, DIVERGED, REACHED, TrialSteps


@dataclass(frozen=True, kw_only=True)
class MeasuredPoint:
    """``S(B)`` at one batch size, with the trials behind it."""

    batch_size: int
    """Batch size in sequences."""
    steps: float | None
    """``S(B)``: the fewest steps to target over the reached trials; ``None`` if none reached."""
    trial_steps: tuple[float, ...]
    """Steps of every reached trial, ascending (the bootstrap resamples these)."""
    n_trials: int
    """All trials at this batch size, whatever their outcome."""
    n_censored: int
    """Trials that never reached the target within their budget."""
    n_diverged: int
    """Trials whose loss became non-finite or blew up."""
    n_other: int
    """Pruned, stopped, failed or unfinished trials."""

    @property
    def n_reached(self) -> int:
        """Trials that reached the target (they alone enter ``steps``)."""
        return len(self.trial_steps)


def measure_points(trials: Iterable[TrialSteps]) -> tuple[MeasuredPoint, ...]:
    """Group trials by batch size; ``S(B)`` is the minimum over the reached ones.

    Censored and diverged trials never enter the minimum (DESIGN.md §1); they are counted.
    Points come back sorted by batch size, including batch sizes where nothing reached.
    """
    grouped: dict[int, list[TrialSteps]] = {}
    for trial in trials:
        grouped.setdefault(trial.batch_size, []).append(trial)
    points = []
    for batch_size in sorted(grouped):
        group = grouped[batch_size]
        reached = sorted(t.steps for t in group if t.outcome == REACHED)
        n_censored = sum(t.outcome == CENSORED for t in group)
        n_diverged = sum(t.outcome == DIVERGED for t in group)
        points.append(
            MeasuredPoint(
                batch_size=batch_size,
                steps=reached[0] if reached else None,
                trial_steps=tuple(reached),
                n_trials=len(group),
                n_censored=n_censored,
                n_diverged=n_diverged,
                n_other=len(group) - len(reached) - n_censored - n_diverged,
            )
        )
    return tuple(points)

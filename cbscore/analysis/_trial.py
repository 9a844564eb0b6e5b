"""One trial's steps-to-target and outcome (DESIGN.md §1, "Steps-to-target")."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

from cbscore.analysis._crossing import first_crossing
from cbscore.errors import ConfigError

#: The trial reached the target; ``steps`` holds the interpolated crossing.
REACHED = "reached"
#: Never reached the target within its budget: ``S > budget``, unknown by how much.
CENSORED = "censored"
#: The loss became non-finite or blew up: a measurement ("this LR is too high"), never an S.
DIVERGED = "diverged"
#: Outcomes that carry no steps and are neither censored nor diverged (pruned, stopped early,
#: crashed, a reference run that spent its budget, or not finished yet). Counted, never entered
#: in the minimum.
OTHER_OUTCOMES = ("pruned", "stopped", "failed", "finished", "queued", "running", "lost")
OUTCOMES = (REACHED, CENSORED, DIVERGED, *OTHER_OUTCOMES)


@dataclass(frozen=True, kw_only=True)
class TrialSteps:
    """Steps-to-target of one trial (one hyper-parameter setting at one batch size)."""

    batch_size: int
    """Batch size in sequences."""
    outcome: str = REACHED
    """One of :data:`OUTCOMES`; only ``reached`` trials enter ``S(B)``."""
    steps: float | None = None
    """Optimizer steps to the target (interpolated); ``None`` unless ``outcome == "reached"``."""
    seed: int | None = None
    """Training seed of the trial (a repeat, not a hyper-parameter); ``None`` when unknown. Trials
    of one seed at one batch size share an ``S``: the minimum over their learning rates."""
    budget_steps: float | None = None
    """For a ``censored`` trial: optimizer steps it ran without reaching the target, so its ``S``
    exceeds this (a lower bound, DESIGN.md §1 "Budgets"); ``None`` otherwise or when unknown."""
    lr: float | None = None
    """Peak learning rate of the trial; ``None`` when unknown. With the rates of a cell known,
    ``S(B)`` is read off a fit across them (:func:`cbscore.analysis.measure_points`)."""
    steps_projected: float | None = None
    """For a ``pruned`` trial stopped at equal tokens: its steps to target projected from its curve
    against the cell's leader (:func:`cbscore.analysis.project_pruned`); the fit across rates reads
    it where the trial is in the best rate's window. ``None`` otherwise."""

    def __post_init__(self):
        # (A plain int or float is read without the checks against the numbers ABCs, which it passes:
        # they are slow, and the simulator builds thousands of trials a study.)
        size = self.batch_size
        if type(size) is not int and (isinstance(size, bool) or not isinstance(size, numbers.Integral)) or size <= 0:
            raise ConfigError("batch_size", size, "must be a positive integer")
        if type(size) is not int:
            object.__setattr__(self, "batch_size", int(size))  # numpy integers become ints
        if self.outcome not in OUTCOMES:
            raise ConfigError("outcome", self.outcome, f"must be one of {', '.join(OUTCOMES)}")
        if self.outcome == REACHED:
            steps = self.steps
            if type(steps) is not float and (isinstance(steps, bool) or not isinstance(steps, numbers.Real)):
                raise ConfigError("steps", steps, "a reached trial needs a positive finite step count")
            if not math.isfinite(steps) or steps <= 0:
                raise ConfigError("steps", steps, "a reached trial needs a positive finite step count")
            object.__setattr__(self, "steps", float(steps))
        elif self.steps is not None:
            raise ConfigError("steps", self.steps, f"must be None for a {self.outcome} trial")
        seed = self.seed
        if seed is not None:
            if type(seed) is not int and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)) or seed < 0:
                raise ConfigError("seed", seed, "must be a non-negative integer or None")
            if type(seed) is not int:
                object.__setattr__(self, "seed", int(seed))
        budget = self.budget_steps
        if budget is not None:
            if self.outcome != CENSORED:
                raise ConfigError("budget_steps", budget, f"must be None for a {self.outcome} trial")
            number = type(budget) is float or isinstance(budget, numbers.Real) and not isinstance(budget, bool)
            if not (number and math.isfinite(budget) and budget > 0):
                raise ConfigError("budget_steps", budget, "must be a positive finite step count")
            object.__setattr__(self, "budget_steps", float(budget))
        proj = self.steps_projected
        if proj is not None:
            if self.outcome != "pruned":
                raise ConfigError("steps_projected", proj, f"must be None for a {self.outcome} trial")
            number = isinstance(proj, numbers.Real) and not isinstance(proj, bool)
            if not (number and math.isfinite(proj) and proj > 0):
                raise ConfigError("steps_projected", proj, "must be a positive finite step count")
            object.__setattr__(self, "steps_projected", float(proj))
        lr = self.lr
        if lr is not None:
            number = type(lr) is float or isinstance(lr, numbers.Real) and not isinstance(lr, bool)
            if not (number and math.isfinite(lr) and lr > 0):
                raise ConfigError("lr", lr, "must be a positive finite learning rate or None")
            object.__setattr__(self, "lr", float(lr))


def trial_steps(
    batch_size: int, eval_steps: Sequence[float], eval_losses: Sequence[float], target: float
) -> TrialSteps:
    """Steps-to-target of one trial from its evaluation history.

    ``reached`` with the first crossing (see :func:`first_crossing`) when the target is reached;
    otherwise ``diverged`` if any evaluated loss was non-finite, else ``censored``. A trainer
    that knows more (a blow-up detector, a pruner) builds :class:`TrialSteps` itself.
    """
    crossing = first_crossing(eval_steps, eval_losses, target)
    if crossing is not None:
        return TrialSteps(batch_size=batch_size, outcome=REACHED, steps=crossing)
    if any(not math.isfinite(float(loss)) for loss in eval_losses):
        return TrialSteps(batch_size=batch_size, outcome=DIVERGED)
    return TrialSteps(batch_size=batch_size, outcome=CENSORED)

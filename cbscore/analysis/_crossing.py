"""First crossing of a target loss by one evaluation history (DESIGN.md §1, "Steps-to-target")."""

from __future__ import annotations

import math
from collections.abc import Sequence


def first_crossing(
    steps: Sequence[float], losses: Sequence[float], target: float
) -> float | None:
    """The first optimizer step at which ``losses`` is at or below ``target``.

    The step is interpolated linearly between the two evaluations that straddle the target
    (DESIGN.md §1: the paper took the first evaluation below the target, which quantises
    large-B points; the interpolation removes that). If the very first evaluation is already at
    or below the target, its own step is returned. A non-finite loss (NaN, ±inf) is never a
    crossing, and an interpolation never reaches back across one: the bracketing evaluation
    must be the finite one just before. Returns ``None`` when the target is never reached.

    Args:
        steps: optimizer steps of the evaluations, increasing.
        losses: evaluated losses at those steps (same length).
        target: the target loss (finite).
    """
    if len(steps) != len(losses):
        raise ValueError(
            f"steps and losses must have the same length, but got {len(steps)} and {len(losses)}."
        )
    target = float(target)
    if not math.isfinite(target):
        raise ValueError(f"target must be a finite number, but got {target!r}.")
    prev_step: float | None = None
    prev_loss: float | None = None  # last finite loss seen just before (None after a non-finite)
    for step, loss in zip(steps, losses):
        step = float(step)
        loss = float(loss)
        if not math.isfinite(loss):
            prev_step, prev_loss = None, None
            continue
        if loss <= target:
            if prev_loss is None or prev_step is None:
                return step
            # Straight line through (prev_step, prev_loss) and (step, loss); prev_loss > target.
            frac = (prev_loss - target) / (prev_loss - loss)
            return prev_step + frac * (step - prev_step)
        prev_step, prev_loss = step, loss
    return None

"""When the trainer evaluates: dense enough to place the target crossing well.

Steps-to-target is interpolated between the two evaluations that straddle the target
(DESIGN.md §1), so its error is at most the gap between them. The schedule is

- step 0 (the initial weights), then log-spaced steps 1, 2, 4, 8, ... while they are below
  ``every_steps`` (the loss moves fastest early);
- then every ``every_steps`` steps;
- and every ``max(1, every_steps // dense_factor)`` steps once the last evaluated loss is within
  ``near_fraction`` of the target (``loss ≤ (1 + near_fraction) · target``);
- always the last step of the budget;
- but never two evaluations closer than ``min_every_steps`` (the last step excepted), which caps
  evaluation compute at a fraction of training compute (see :func:`min_every_steps`).

It is a pure function of ``(step, last evaluated loss)``, so a resumed trial evaluates at the
same steps as an uninterrupted one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Default number of regular evaluations over a budget (``every_steps = ceil(total / this)``).
DEFAULT_EVALS_PER_RUN = 40


def default_every_steps(total_steps: int) -> int:
    """Regular evaluation interval for a run of ``total_steps`` steps."""
    return max(1, math.ceil(total_steps / DEFAULT_EVALS_PER_RUN))


@dataclass(frozen=True, kw_only=True)
class EvalSchedule:
    total_steps: int
    """Last step of the budget (always evaluated)."""
    every_steps: int
    """Regular interval in optimizer steps."""
    target_loss: float | None = None
    """The target; ``None`` turns the dense phase off."""
    near_fraction: float = 0.05
    """Go dense once the last loss is within this fraction above the target."""
    dense_factor: int = 5
    """The dense interval is ``every_steps // dense_factor`` (at least 1)."""
    min_every_steps: int = 1
    """No two evaluations closer than this many steps (the last step of the budget excepted)."""

    def next_step(self, step: int, last_loss: float | None) -> int:
        """The first evaluation step after ``step``, given the last evaluated loss."""
        candidates = [self.total_steps]
        power = 1 << max(0, step).bit_length()  # next power of two above step (1 after 0)
        if power < self.every_steps:
            candidates.append(power)
        interval = self.every_steps
        if (
            self.target_loss is not None
            and last_loss is not None
            and math.isfinite(last_loss)
            and last_loss <= (1 + self.near_fraction) * self.target_loss
        ):
            interval = max(1, self.every_steps // self.dense_factor)
        candidates.append((step // interval + 1) * interval)
        return min(max(min(candidates), step + self.min_every_steps), self.total_steps)


def min_every_steps(*, eval_windows: int, context_tokens: int, n_models: int, batch_tokens: int,
                    max_eval_fraction: float) -> int:
    """Fewest steps between evaluations so that evaluation costs at most ``max_eval_fraction`` of
    training compute. One evaluation is a forward pass over ``eval_windows·T`` tokens for each of
    ``n_models`` weight sets (raw + every EWA τ); a forward pass costs about a third of a training
    step per token (2N of 6N FLOPs, Kaplan et al. 2020, §2.1)."""
    eval_cost = n_models * eval_windows * context_tokens / 3  # in training-token equivalents
    return max(1, math.ceil(eval_cost / (max_eval_fraction * batch_tokens)))

"""Learning-rate schedules with a warm-up fixed in tokens (DESIGN.md §1, "Recipe defaults").

The warm-up is fixed in *tokens*, so it lasts ``ceil(warmup_tokens / batch_tokens)`` optimizer
steps: doubling the batch halves the warm-up in steps. It rises linearly from
``0.1 × lr`` at the first update to ``lr`` (Zhang et al. 2025, §3.1). After the warm-up:

- ``constant``: ``lr`` to the end (the paper's schedule);
- ``cosine``: half a cosine from ``lr`` to ``min_lr_ratio × lr`` at the last step
  (Loshchilov & Hutter 2017, arXiv 1608.03983);
- ``wsd`` (warmup-stable-decay): ``lr`` until the last ``decay_fraction`` of the steps, then a
  linear decay to ``min_lr_ratio × lr`` (Hu et al. 2024, MiniCPM, arXiv 2404.06395).

Cosine, with ``η_min = min_lr_ratio·lr`` and ``p`` the share of the post-warm-up steps done
(Loshchilov & Hutter 2017, arXiv 1608.03983, eq. 5 with one cycle and no restart)::

    η(p) = η_min + (lr − η_min)·(1 + cos(π·p)) / 2

WSD with ``H = total_steps`` and ``k = round(decay_fraction·H)`` decay steps (Hägele et al. 2024,
"Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations", arXiv 2405.18392,
§3, linear cool-down)::

    η(i) = lr                                            for W ≤ i < s = H − k    (stable)
    η(i) = lr + (η_min − lr)·(i − s) / (H − 1 − s)        for s ≤ i < H             (decay)

Only the decay depends on ``H``: a run trained straight to ``H`` and a run at ``lr`` whose
checkpoint at step ``s`` is decayed over the next ``k`` steps take the same rates at every step
(Hägele et al. 2024, §3: one stable run, a cool-down from any of its checkpoints).
:func:`wsd_decay_start` gives ``s`` for a horizon and :func:`wsd_horizon` the horizon whose decay
starts at a given step (:mod:`cbscore.decay`).

Steps are counted from 0: update ``i`` (the ``i + 1``-th optimizer step) uses ``lr_at(i)``.

In tokens. A run whose batch changes (a batch-size schedule) or that continues another run (a
branch, Merrill et al. 2025, arXiv 2505.23971: "no re-warm-up") reads one schedule by its stream
position: :class:`TokenLrSchedule` is the step schedule of an *anchor* run at
``anchor_batch_tokens`` a step, evaluated at the fractional anchor step
``tokens / anchor_batch_tokens``. A run at the anchor's batch gets exactly the step schedule
(``tokens / anchor_batch_tokens`` is then a whole number), so a branch at ``k = 1`` takes the very
learning rates its base run would have.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cbscore.recipe import WARMUP_START_RATIO

SCHEDULES = ("constant", "cosine", "wsd")


def warmup_steps(warmup_tokens: int, batch_tokens: int) -> int:
    """Optimizer steps of a warm-up of ``warmup_tokens`` tokens at ``batch_tokens`` tokens a step."""
    return math.ceil(warmup_tokens / batch_tokens)


def wsd_decay_start(total_steps: int, decay_fraction: float, warmup_steps: int = 0) -> int:
    """First step of a ``wsd`` run's decay: ``H − max(1, round(decay_fraction·H))``, never inside
    the warm-up."""
    return max(warmup_steps, total_steps - max(1, round(decay_fraction * total_steps)))


def wsd_horizon(decay_start: int, decay_fraction: float, warmup_steps: int = 0) -> int | None:
    """The horizon ``H`` (steps) of the ``wsd`` run whose decay starts at step ``decay_start``, the
    smallest if several do; ``None`` if none does (a start inside the warm-up, or one that
    rounding skips). With ``decay_fraction`` 0.2 every start from 4 steps on has one."""
    if not 0 < decay_fraction < 1 or decay_start < max(1, warmup_steps):
        return None
    guess = int(decay_start / (1 - decay_fraction))
    for horizon in range(max(decay_start + 1, guess - 2), guess + 4):
        if wsd_decay_start(horizon, decay_fraction, warmup_steps) == decay_start:
            return horizon
    return None


@dataclass(frozen=True, kw_only=True)
class LrSchedule:
    """Learning rate as a pure function of the optimizer step."""

    kind: str
    """``constant``, ``cosine`` or ``wsd``."""
    lr: float
    """Peak learning rate."""
    warmup_steps: int
    """Steps of linear warm-up from ``WARMUP_START_RATIO × lr`` (0 = none)."""
    total_steps: int
    """Steps of the whole run (the decays of ``cosine`` and ``wsd`` end there)."""
    min_lr_ratio: float = 0.1
    """Floor of ``cosine`` and ``wsd`` as a fraction of ``lr``."""
    decay_fraction: float = 0.2
    """``wsd``: fraction of ``total_steps`` spent in the final linear decay."""

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ValueError(f"kind must be one of {', '.join(SCHEDULES)}, but got {self.kind!r}.")

    def lr_at(self, step: int) -> float:
        """Learning rate of update ``step`` (0-based)."""
        if step < self.warmup_steps:
            # linear from 0.1·lr at step 0 towards lr, reached at step warmup_steps
            return self.lr * (WARMUP_START_RATIO + (1 - WARMUP_START_RATIO) * step / self.warmup_steps)
        if self.kind == "constant":
            return self.lr
        floor = self.min_lr_ratio * self.lr
        if self.kind == "cosine":
            span = max(1, self.total_steps - 1 - self.warmup_steps)
            progress = min(1.0, (step - self.warmup_steps) / span)
            return floor + (self.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))
        # wsd
        decay_start = wsd_decay_start(self.total_steps, self.decay_fraction, self.warmup_steps)
        if step < decay_start:
            return self.lr
        progress = min(1.0, (step - decay_start) / max(1, self.total_steps - 1 - decay_start))
        return self.lr + (floor - self.lr) * progress

    __call__ = lr_at


@dataclass(frozen=True, kw_only=True)
class TokenLrSchedule:
    """Learning rate as a pure function of the stream position in tokens."""

    steps: LrSchedule
    """The anchor run's schedule in its own steps."""
    anchor_batch_tokens: int
    """Tokens per step of the anchor run (its warm-up lasts ``steps.warmup_steps`` such steps)."""

    def lr_at_tokens(self, tokens: int) -> float:
        """Learning rate of the update that starts at stream position ``tokens``."""
        return self.steps.lr_at(tokens / self.anchor_batch_tokens)

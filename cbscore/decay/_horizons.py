"""The horizons a cell is read at: a geometric grid in tokens, each a whole number of the cell's steps.

Horizons are chosen in *tokens* (the same grid at every batch size, so every ``B`` is read at the
same points of training), from ``low`` to ``high`` at a ratio ``ratio`` apart, and the
setting's D itself, so that the reference cell's loss at D (the target) is one of them. At batch
``B`` a horizon rounds to ``H = round(tokens / (B·T))`` steps. A ``wsd`` horizon also needs its
decay to start at a step of the stable run past the warm-up (:func:`cbscore.train.schedules.wsd_decay_start`);
those that do not are dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cbscore.errors import ConfigError
from cbscore.train.schedules import wsd_decay_start


@dataclass(frozen=True, kw_only=True)
class DecayPoint:
    """One ``wsd`` decay branch of a stable run: from step ``branch_step`` to the horizon."""

    horizon_steps: int
    """``H``: the decayed run's length, steps (its rate reaches the floor at step ``H − 1``)."""
    branch_step: int
    """``s = H − k``: the stable run's step (snapshot) the decay starts from."""
    decay_steps: int
    """``k = round(f·H)`` (at least 1): steps of the decay."""

    def tokens(self, batch_tokens: int) -> tuple[int, int]:
        """``(branch tokens, horizon tokens)`` at ``batch_tokens`` tokens a step."""
        return self.branch_step * batch_tokens, self.horizon_steps * batch_tokens


def horizon_tokens(d_tokens: int, *, low: float, high: float, ratio: float) -> tuple[int, ...]:
    """Horizons in tokens: ``D·low·ratio^j`` up to ``D·high``, and ``D``, increasing."""
    if not (isinstance(d_tokens, int) and d_tokens > 0):
        raise ConfigError("tokens", d_tokens, "must be a positive whole number of tokens")
    if not 0 < low <= 1 <= high or not ratio > 1:
        raise ConfigError("decay.horizons", (low, high, ratio), "need 0 < low ≤ 1 ≤ high and ratio > 1")
    n = int(math.floor(math.log(high / low) / math.log(ratio) + 1e-9))
    grid = {round(d_tokens * low * ratio**j) for j in range(n + 1)} | {d_tokens}
    return tuple(sorted(grid))


def wsd_points(horizons_tokens, *, batch_tokens: int, decay_fraction: float, warmup_steps: int) -> tuple[DecayPoint, ...]:
    """The decay branches of a stable run at ``batch_tokens`` a step: one per horizon whose decay
    starts after the warm-up, distinct in steps, increasing."""
    out: dict[int, DecayPoint] = {}
    for tokens in horizons_tokens:
        horizon = max(1, round(tokens / batch_tokens))
        start = wsd_decay_start(horizon, decay_fraction, warmup_steps)
        if start < max(1, warmup_steps) or start >= horizon or horizon - start != max(1, round(decay_fraction * horizon)):
            continue  # the decay would begin inside the warm-up: not a branch of the stable phase
        out.setdefault(horizon, DecayPoint(horizon_steps=horizon, branch_step=start, decay_steps=horizon - start))
    return tuple(out[h] for h in sorted(out))


def cosine_horizons(horizons_tokens, *, batch_tokens: int, warmup_steps: int) -> tuple[int, ...]:
    """The cosine family's run lengths in steps at ``batch_tokens`` a step: each past the warm-up
    by a step at least, distinct, increasing."""
    return tuple(sorted({h for h in (max(1, round(t / batch_tokens)) for t in horizons_tokens) if h > warmup_steps}))

"""The batch-size warm-up a local-CBS curve recommends, and the steps it saves, counted exactly.

Merrill et al. 2025 (arXiv 2505.23971, §5): start at ``B0`` and double the batch at the point
``D_j`` where the local CBS passes twice the current batch, ``B*(D_j) = 2·B_j``; the learning
rate is multiplied by ``√2`` at each doubling (the square-root rule for Adam, Malladi et al. 2022,
arXiv 2205.10287). On the fitted curve ``B*(t) = a·t^b`` (:class:`LocalCbsCurve`),

    D_j = (2·B_j / a)^(1/b),    B_j = 2^j·B0,    lr_j = f(2^j)·η0.

Steps are counted by the trainer's own plan (:func:`cbscore.train.batch_plan.build_plan`: a switch at
the first step boundary at or after ``D_j``, the budget rounded down to whole steps), so the
count is the one a run of :attr:`WarmupPlan.batch_schedule` takes. Their OLMo 1B run (sequences of
4,096 tokens, 1,024 → 2,048 at 168B tokens → 4,096 at 503B) takes 89.2k steps against 156.9k at
1,024 throughout, over about 658B tokens (``156.9k × 1,024 × 4,096``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from cbscore.errors import ConfigError, positive_int
from cbscore.local._branches import lr_factor
from cbscore.local._curve import LocalCbsCurve
from cbscore.train.batch_plan import build_plan


@dataclass(frozen=True, kw_only=True)
class WarmupPlan:
    """A batch-size warm-up and its step count against constant-batch controls."""

    base_batch_size: int
    """``B0``, sequences."""
    context_tokens: int
    """``T``, tokens per sequence."""
    total_tokens: int
    """The run's budget, tokens."""
    batch_schedule: tuple[tuple[int, int, float], ...]
    """``(tokens_from, batch_size, lr_multiplier)``: ``TrainConfig.branch.batch_schedule`` as is."""
    steps: int
    """Optimizer steps of the warm-up run."""
    constant_steps: int
    """Steps at ``B0`` throughout (the small-batch control)."""
    large_batch_steps: int
    """Steps at the final batch throughout (the large-batch control)."""
    notes: tuple[str, ...] = ()

    @property
    def steps_saved(self) -> int:
        return self.constant_steps - self.steps

    @property
    def fraction_saved(self) -> float:
        """``1 − steps / constant_steps``."""
        return 1.0 - self.steps / self.constant_steps

    @property
    def final_batch_size(self) -> int:
        return self.batch_schedule[-1][1] if self.batch_schedule else self.base_batch_size


def schedule_warmup(*, base_batch_size: int, context_tokens: int, total_tokens: int, switch_tokens,
                    growth: int = 2, lr_rule: str = "sqrt") -> WarmupPlan:
    """The warm-up that multiplies the batch by ``growth`` at each of ``switch_tokens`` (increasing
    stream positions, tokens), the learning rate by ``f(growth)`` each time, with its exact steps."""
    positive_int("base_batch_size", base_batch_size)
    positive_int("context_tokens", context_tokens)
    positive_int("total_tokens", total_tokens)
    positive_int("growth", growth)
    # (2·B_j/a)^(1/b) of a fitted curve lands a rounding error above a whole token (1024.0000000000007
    # for a curve through B*(1024) = 8): a relative 1e-12 below counts as that token, not the next
    switches = [int(math.ceil(d * (1 - 1e-12))) for d in switch_tokens]
    if any(b <= a for a, b in zip([0, *switches], switches)) or (switches and switches[-1] >= total_tokens):
        raise ConfigError("switch_tokens", list(switch_tokens), f"must increase from above 0 to below total_tokens={total_tokens}")
    schedule = tuple((d, base_batch_size * growth ** (j + 1), lr_factor(growth ** (j + 1), lr_rule))
                     for j, d in enumerate(switches))
    return _plan(base_batch_size, context_tokens, total_tokens, schedule, ())


def plan_warmup(curve: LocalCbsCurve, *, base_batch_size: int, context_tokens: int, total_tokens: int,
                max_batch_size: int | None = None, growth: int = 2, lr_rule: str = "sqrt") -> WarmupPlan:
    """Read the warm-up off a fitted local-CBS curve: switch to ``growth·B_j`` at the ``D_j`` where
    ``B*(D_j) = growth·B_j`` (before ``total_tokens``; no batch above ``max_batch_size``)."""
    positive_int("base_batch_size", base_batch_size)
    positive_int("growth", growth)
    if growth < 2:
        raise ConfigError("growth", growth, "must be 2 or more (the batch grows at each switch)")
    switches, notes, batch = [], [], base_batch_size
    while max_batch_size is None or batch * growth <= max_batch_size:
        d = curve.tokens_at(growth * batch)
        if not d < total_tokens:
            break
        d = max(d, switches[-1] + 1 if switches else 1.0)  # a curve at 2·B_j already: switch at once
        switches.append(d)
        batch *= growth
    if not switches:
        notes.append(f"the local CBS stays below {growth}·B0 = {growth * base_batch_size} within the budget: no switch")
    if curve.exponent <= 0:
        notes.append(f"the fitted local CBS does not grow (exponent {curve.exponent:.3g})")
    plan = schedule_warmup(base_batch_size=base_batch_size, context_tokens=context_tokens, total_tokens=total_tokens,
                           switch_tokens=switches, growth=growth, lr_rule=lr_rule)
    return replace(plan, notes=tuple(notes) + curve.notes)


def _plan(b0: int, context_tokens: int, total_tokens: int, schedule, notes) -> WarmupPlan:
    def steps(batch: int, entries=()) -> int:
        return build_plan(start_tokens=0, batch_size=batch, context_tokens=context_tokens, max_tokens=total_tokens,
                          schedule=tuple(entries)).total_steps

    final = schedule[-1][1] if schedule else b0
    return WarmupPlan(base_batch_size=b0, context_tokens=context_tokens, total_tokens=total_tokens,
                      batch_schedule=tuple(schedule), steps=steps(b0, schedule), constant_steps=steps(b0),
                      large_batch_steps=steps(final), notes=tuple(notes))

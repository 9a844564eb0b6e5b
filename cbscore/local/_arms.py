"""The warm-up run and its two constant-batch controls, trained at equal tokens.

Merrill et al. 2025 (arXiv 2505.23971, §5 and Table 1) validate a batch-size warm-up by training it
beside two controls on the same tokens: the *small-batch control* at ``B0`` and ``η0`` throughout
(the run the warm-up must match in loss) and the *large-batch control* at the warm-up's final batch
and learning rate throughout (what a team would run without the warm-up to take as few steps). The
warm-up should reach the small-batch control's loss in far fewer steps; the large-batch control
shows what skipping it costs.

*Equal tokens.* The trainer rounds a run's budget down to whole steps of its batch and switches a
schedule at the first step boundary at or after ``tokens_from`` (:mod:`cbscore.train.batch_plan`). So
that all three arms end on the very same token, every switch sits on a multiple of
``u = B_final·T`` (a step boundary of every batch of the warm-up, since each divides ``B_final``)
and the arms train ``D_eq = ⌊D/u⌋·u`` tokens: :func:`on_equal_token_grid` moves each switch of a
recommended schedule up to that grid (at most ``u`` tokens later, as the trainer already moves
it to a step boundary), just as the branches' windows are a multiple of every ``k·B0·T``
(:func:`cbscore.study.local_spec.window_unit_tokens`).

Pure integer arithmetic; the arms' ``TrainConfig`` is built by the study planner
(:func:`cbscore.study.local_plan.arm_trial`) from the base run's, so that all three share its
recipe, its learning-rate schedule read in tokens and its seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cbscore.errors import ConfigError, positive_finite, positive_int
from cbscore.train.batch_plan import build_plan

#: The three arms, in the order they are reported.
ARM_ROLES = ("warmup", "control-small", "control-large")


@dataclass(frozen=True, kw_only=True)
class WarmupArm:
    """One arm: its batch and learning rate, its schedule, its budget and its exact step count."""

    role: str
    """``warmup``, ``control-small`` or ``control-large`` (:data:`ARM_ROLES`)."""
    batch_size: int
    """Sequences per step at the start (``B0`` for the warm-up and the small control)."""
    lr: float
    """Peak learning rate at the start (``η0``, or the warm-up's final rate for the large control)."""
    batch_schedule: tuple[tuple[int, int, float], ...]
    """``TrainConfig.branch.batch_schedule``: the warm-up's switches; empty for the controls."""
    max_tokens: int
    """``D_eq``: the tokens every arm trains, a multiple of ``B_final·T``."""
    steps: int
    """Optimizer steps the trainer takes over ``max_tokens`` (its own plan, exactly)."""

    @property
    def final_batch_size(self) -> int:
        return self.batch_schedule[-1][1] if self.batch_schedule else self.batch_size

    def final_lr(self) -> float:
        """The learning rate of the last segment (the schedule's multipliers are absolute)."""
        return self.lr * self.batch_schedule[-1][2] if self.batch_schedule else self.lr


def equal_token_budget(total_tokens: int, *, final_batch_size: int, context_tokens: int) -> int:
    """``D_eq = ⌊D / (B_final·T)⌋·B_final·T``: the tokens all three arms train."""
    unit = final_batch_size * context_tokens
    return total_tokens // unit * unit


def on_equal_token_grid(batch_schedule, *, context_tokens: int, total_tokens: int,
                        field: str = "batch_schedule") -> tuple[tuple[int, int, float], ...]:
    """A recommended ``(tokens_from, batch_size, lr_multiplier)`` schedule with each switch moved
    up to the next multiple of ``u = B_final·T`` (and at least ``u`` after the previous one); a
    schedule that then leaves no step of its final batch before ``D_eq`` raises a ConfigError
    naming ``field``."""
    entries = [tuple(e) for e in batch_schedule]
    if not entries:
        raise ConfigError(field, [], "must list at least one switch (without one the warm-up is the small-batch "
                                     "control)")
    unit = int(entries[-1][1]) * context_tokens
    out, previous = [], 0
    for tokens_from, batch, multiplier in entries:
        moved = max(math.ceil(tokens_from / unit) * unit, previous + unit)
        out.append((int(moved), int(batch), float(multiplier)))
        previous = moved
    budget = equal_token_budget(total_tokens, final_batch_size=int(entries[-1][1]), context_tokens=context_tokens)
    if out[-1][0] >= budget:
        raise ConfigError(field, [list(e) for e in entries],
                          f"its last switch, moved up to a whole step of the final batch ({out[-1][0]:,} tokens), "
                          f"leaves no step before the arms' equal budget of {budget:,} tokens")
    return tuple(out)


def warmup_arms(*, base_batch_size: int, base_lr: float, context_tokens: int, total_tokens: int,
                batch_schedule) -> tuple[WarmupArm, ...]:
    """The three arms of a warm-up schedule already on the equal-token grid
    (:func:`on_equal_token_grid`), at ``D_eq`` tokens each, in :data:`ARM_ROLES` order."""
    positive_int("base_batch_size", base_batch_size)
    positive_finite("base_lr", base_lr)
    positive_int("context_tokens", context_tokens)
    positive_int("total_tokens", total_tokens)
    schedule = tuple((int(t), int(b), float(m)) for t, b, m in batch_schedule)
    if not schedule:
        raise ConfigError("batch_schedule", [], "must list at least one switch")
    final_batch, final_multiplier = schedule[-1][1], schedule[-1][2]
    budget = equal_token_budget(total_tokens, final_batch_size=final_batch, context_tokens=context_tokens)
    unit = final_batch * context_tokens
    for t, b, _ in schedule:
        if t % unit or final_batch % b or b % base_batch_size:
            raise ConfigError("batch_schedule", [list(e) for e in schedule],
                              f"must switch on multiples of B_final·T = {unit} tokens between batches that divide "
                              f"B_final = {final_batch} and are multiples of B0 = {base_batch_size} "
                              "(on_equal_token_grid puts a recommended schedule there)")

    def steps(batch: int, entries=()) -> int:
        return build_plan(start_tokens=0, batch_size=batch, context_tokens=context_tokens, max_tokens=budget,
                          schedule=tuple(entries)).total_steps

    return (
        WarmupArm(role="warmup", batch_size=base_batch_size, lr=float(base_lr), batch_schedule=schedule,
                  max_tokens=budget, steps=steps(base_batch_size, schedule)),
        WarmupArm(role="control-small", batch_size=base_batch_size, lr=float(base_lr), batch_schedule=(),
                  max_tokens=budget, steps=steps(base_batch_size)),
        WarmupArm(role="control-large", batch_size=final_batch, lr=float(base_lr) * final_multiplier,
                  batch_schedule=(), max_tokens=budget, steps=steps(final_batch)),
    )

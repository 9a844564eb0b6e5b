"""The batch plan: which sequences and which batch size each optimizer step takes.

A trial's position in the training stream is counted in *tokens* (``tokens = sequences · T``),
not in steps, so that a run whose batch changes (a batch-size schedule) or that starts from
another run's checkpoint (a branch, :mod:`cbscore.train.branch`) still reads the one seeded order of
windows (:class:`cbscore.data.stream.WindowStream`) without a gap or a repeat.

The plan is a list of *segments*. Segment ``j`` starts at stream position ``first_tokens`` at this
run's step ``first_step`` and takes ``steps`` steps of ``batch_size`` sequences each; step ``i`` of
the run takes windows ``first_tokens/T + (i − first_step)·batch_size`` onwards. A run without a
schedule has one segment from ``start_tokens`` (0, or a branch's base position) to the budget.

A switch to the next entry of a schedule happens at the first step boundary at or after its
``tokens_from`` (a boundary can only fall on a whole step of the current batch); the last segment
ends at the budget, rounded down to whole steps (never over budget), and ``max_steps`` caps the
total. Merrill et al. 2025 (arXiv 2505.23971, §5) switch their batch-size warm-up in tokens the
same way.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Segment:
    """A stretch of the run at one batch size."""

    first_step: int
    """This run's step (0-based) at which the segment starts."""
    first_tokens: int
    """Stream position (tokens seen by the model since its initialisation) at ``first_step``."""
    batch_size: int
    """Sequences per optimizer step in this segment."""
    lr_multiplier: float
    """The segment's learning rate as a multiple of the schedule's (1.0 for the first)."""
    steps: int
    """Optimizer steps in the segment."""

    @property
    def end_step(self) -> int:
        return self.first_step + self.steps


@dataclass(frozen=True, kw_only=True)
class BatchPlan:
    """Steps → (stream position, batch size, learning-rate multiplier), a pure function."""

    context_tokens: int
    """Tokens per sequence T."""
    segments: tuple[Segment, ...]
    """In order; every one but possibly the last has at least one step."""

    @property
    def start_tokens(self) -> int:
        """Stream position before this run's first step."""
        return self.segments[0].first_tokens

    @property
    def total_steps(self) -> int:
        """Optimizer steps of the whole run."""
        return self.segments[-1].end_step

    @property
    def end_tokens(self) -> int:
        """Stream position after the last step."""
        return self.tokens_at(self.total_steps)

    @property
    def switch_steps(self) -> tuple[int, ...]:
        """Steps at which a later segment starts (the batch size changes before that step)."""
        return tuple(s.first_step for s in self.segments[1:] if s.steps > 0)

    def segment_at(self, step: int) -> Segment:
        """The segment that step ``step`` (0-based) belongs to; ``total_steps`` → the last."""
        starts = [s.first_step for s in self.segments]
        index = bisect.bisect_right(starts, step) - 1
        # segments of zero steps share their first_step with the next one: take the later
        return self.segments[max(index, 0)]

    def tokens_at(self, step: float) -> float | int:
        """Stream position after ``step`` steps (an int for whole steps; linear inside a step)."""
        seg = self.segment_at(math.floor(step) if step < self.total_steps else self.total_steps)
        return seg.first_tokens + (step - seg.first_step) * (seg.batch_size * self.context_tokens)

    def first_sequence(self, step: int) -> int:
        """Index in the stream's window order of step ``step``'s first sequence."""
        return self.tokens_at(step) // self.context_tokens

    def steps_before(self, tokens: int) -> int:
        """Steps of this run that start before stream position ``tokens`` (0 when it is behind
        the start). Past the end the last segment's batch counts on, as if the run went on (a
        warm-up longer than the run is reported in the run's own steps, as before schedules)."""
        for seg in self.segments[:-1]:
            seg_tokens = seg.batch_size * self.context_tokens
            if tokens <= seg.first_tokens + seg.steps * seg_tokens:
                return seg.first_step + max(0, math.ceil((tokens - seg.first_tokens) / seg_tokens))
        last = self.segments[-1]
        return last.first_step + max(0, math.ceil((tokens - last.first_tokens) / (last.batch_size * self.context_tokens)))

    def is_boundary(self, tokens: int) -> bool:
        """Whether the run is at stream position ``tokens`` after some whole step (start excluded)."""
        step = self.steps_before(tokens)
        return 0 < step <= self.total_steps and self.tokens_at(step) == tokens


def build_plan(*, start_tokens: int, batch_size: int, context_tokens: int, max_tokens: int,
               max_steps: int | None = None,
               schedule: tuple[tuple[int, int, float], ...] = ()) -> BatchPlan:
    """The plan of a run from stream position ``start_tokens`` to ``max_tokens``.

    ``schedule`` lists ``(tokens_from, batch_size, lr_multiplier)`` in increasing ``tokens_from``
    (checked by :class:`cbscore.train.config.TrainConfig`); the run starts at ``batch_size`` with
    multiplier 1.0. ``max_steps`` caps this run's steps (the last segments shrink or vanish).
    """
    entries = [(start_tokens, batch_size, 1.0), *schedule]
    segments: list[Segment] = []
    step, tokens = 0, start_tokens
    budget_steps = math.inf if max_steps is None else max_steps
    for j, (_, size, multiplier) in enumerate(entries):
        seg_tokens = size * context_tokens
        room = max(0, (max_tokens - tokens) // seg_tokens)  # whole steps left in the budget
        if j + 1 < len(entries):
            # up to the first boundary at or after the next entry's tokens_from
            room = min(room, max(0, math.ceil((entries[j + 1][0] - tokens) / seg_tokens)))
        steps = int(min(room, budget_steps - step))
        segments.append(Segment(first_step=step, first_tokens=tokens, batch_size=size,
                                lr_multiplier=float(multiplier), steps=steps))
        step += steps
        tokens += steps * seg_tokens
    return BatchPlan(context_tokens=context_tokens, segments=tuple(segments))

"""When the trainer evaluates: dense enough near the target to place the crossing well at every B.

Steps-to-target is read off a local power-law fit of the evaluations around the target
(:func:`cbscore.analysis.first_crossing`, DESIGN.md §1), so what matters is how many evaluations
lie close before the crossing. The schedule is

- step 0 (the initial weights), then log-spaced steps 1, 2, 4, 8, ... while they are below
  ``every_steps`` (the loss moves fastest early);
- then every ``every_steps`` steps;
- and every ``max(1, every_steps // dense_factor)`` steps once the last evaluated loss is within
  ``near_fraction`` of the target (``loss ≤ (1 + near_fraction) · target``);
- always the last step of the budget;
- none of these closer than ``regular_min_every_steps`` (the cost cap :func:`min_every_steps`,
  which keeps evaluation compute a bounded share of training compute, but never so sparse that
  a budget gets fewer than :data:`MIN_EVALS_PER_RUN` evaluations);
- **and the near-target promise**, which the cost cap does not thin: from the last two
  evaluations the schedule extrapolates a power law (``log loss`` linear in ``log step``) to the
  step ``ŝ`` where it meets the target, evaluates once at ``near_start · ŝ`` and from there on
  every ``max(1, ⌊step · near_span / near_evals⌋)`` steps while ``step ≥ near_start · ŝ``
  (``ŝ`` re-predicted at every evaluation). Steps growing by at most a factor
  ``1 + near_span/near_evals`` put at least ``near_evals`` evaluations in the last ``near_span``
  of the steps before any crossing that lies past ``near_start · ŝ`` (defaults: ≥ 8 in the last
  25%). On a curve that flattens towards its irreducible loss the power law predicts the
  crossing early, so the window opens early, not late; a trial that stalls sees ``ŝ`` recede
  and leaves the window.

Cost: the promise adds about ``near_evals · ln(1/near_start) / near_span`` ≈ 11 evaluations to a
trial that reaches the target, whatever its length; at small B, where a trial is a few hundred
steps, they can cost more than its training (``reproduce``: one evaluation of 64 windows × 4
weight sets is 43 training steps at B = 2). That is the price of a crossing that is measured,
not guessed, at every B; ``eval_windows`` is the knob that lowers it.

It is a pure function of ``(step, last evaluated loss, the evaluation before)``, so a resumed
trial evaluates at the same steps as an uninterrupted one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Default number of regular evaluations over a budget (``every_steps = ceil(total / this)``).
DEFAULT_EVALS_PER_RUN = 40

#: The cost cap never spaces regular evaluations further apart than ``total / this``: a trial needs
#: a few evaluations before the target for the near-target window to be predicted from them.
MIN_EVALS_PER_RUN = 8


def default_every_steps(total_steps: int) -> int:
    """Regular evaluation interval for a run of ``total_steps`` steps."""
    return max(1, math.ceil(total_steps / DEFAULT_EVALS_PER_RUN))


def predicted_crossing(previous: tuple[float, float], last: tuple[float, float], target: float) -> float | None:
    """Step where the power law through two evaluations ``(step, loss)`` meets ``target``;
    ``None`` when it cannot (a step ≤ 0, a non-positive or non-finite loss, or a loss that does
    not fall)."""
    (s0, l0), (s1, l1) = previous, last
    if not (0 < s0 < s1 and all(math.isfinite(v) and v > 0 for v in (l0, l1, target)) and l1 < l0):
        return None
    slope = math.log(l1 / l0) / math.log(s1 / s0)  # < 0
    log_step = math.log(s1) + math.log(target / l1) / slope
    return math.exp(log_step) if log_step < 700 else None  # beyond any budget: no prediction


@dataclass(frozen=True, kw_only=True)
class EvalSchedule:
    total_steps: int
    """Last step of the budget (always evaluated)."""
    every_steps: int
    """Regular interval in optimizer steps."""
    target_loss: float | None = None
    """The target; ``None`` turns the dense phase and the near-target promise off."""
    near_fraction: float = 0.05
    """Go dense once the last loss is within this fraction above the target."""
    dense_factor: int = 5
    """The dense interval is ``every_steps // dense_factor`` (at least 1)."""
    min_every_steps: int = 1
    """Cost cap: no two regular or dense evaluations closer than this many steps (the last step
    of the budget and the near-target promise excepted), relaxed to keep ``MIN_EVALS_PER_RUN``."""
    near_evals: int = 8
    """The promise: at least this many evaluations in the last ``near_span`` of the steps before
    the crossing (not thinned by the cost cap); 0 turns it off."""
    near_span: float = 0.25
    """The stretch before the crossing that holds ``near_evals`` evaluations, as a share of its step."""
    near_start: float = 0.7
    """The near-target window opens at this share of the predicted crossing step (below
    ``1 − near_span`` to leave room for a prediction that is late)."""

    @property
    def regular_min_every_steps(self) -> int:
        """The cost cap as applied: ``min_every_steps``, but at most ``total / MIN_EVALS_PER_RUN``."""
        return max(1, min(self.min_every_steps, math.ceil(self.total_steps / MIN_EVALS_PER_RUN)))

    def next_step(self, step: int, last_loss: float | None,
                  previous: tuple[float, float] | None = None) -> int:
        """The first evaluation step after ``step``, given the last evaluated loss and the
        ``(step, loss)`` of the evaluation before it (``None`` if there is none)."""
        candidates = [self.total_steps]
        power = 1 << max(0, step).bit_length()  # next power of two above step (1 after 0)
        if power < self.every_steps:
            candidates.append(power)
        target = self.target_loss
        near_loss = (target is not None and last_loss is not None and math.isfinite(last_loss)
                     and last_loss <= (1 + self.near_fraction) * target)
        interval = max(1, self.every_steps // self.dense_factor) if near_loss else self.every_steps
        candidates.append((step // interval + 1) * interval)
        nxt = min(max(min(candidates), step + self.regular_min_every_steps), self.total_steps)

        # the near-target promise, outside the cost cap
        if target is None or last_loss is None or previous is None or self.near_evals <= 0:
            return nxt
        s_hat = predicted_crossing(previous, (step, last_loss), target)
        if s_hat is None:
            return nxt
        dense = max(1, math.floor(step * self.near_span / self.near_evals))
        opens = self.near_start * s_hat
        # inside the window (or within one dense interval of it): dense; else one evaluation where
        # it opens. Never closer than one dense interval, so a prediction that creeps forward as
        # the curve flattens does not make evaluations one step apart.
        nxt = min(nxt, step + dense if step + dense >= opens else math.ceil(opens))
        return min(nxt, self.total_steps)


def min_every_steps(*, eval_windows: int, context_tokens: int, n_models: int, batch_tokens: int,
                    max_eval_fraction: float) -> int:
    """Fewest steps between evaluations so that evaluation costs at most ``max_eval_fraction`` of
    training compute. One evaluation is a forward pass over ``eval_windows·T`` tokens for each of
    ``n_models`` weight sets (raw + every EWA τ); a forward pass costs about a third of a training
    step per token (2N of 6N FLOPs, Kaplan et al. 2020, §2.1)."""
    eval_cost = n_models * eval_windows * context_tokens / 3  # in training-token equivalents
    return max(1, math.ceil(eval_cost / (max_eval_fraction * batch_tokens)))

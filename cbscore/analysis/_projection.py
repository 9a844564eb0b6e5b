"""Steps to target of a trial stopped early, read off its curve against the cell's leader.

A trial stopped at equal tokens (``prune_at_equal_tokens``) never reaches the target, but up to its
stop it traced the same held-out loss levels as the cell's best trial, later. At each of its last
evaluations ``(t_i, L_i)`` the leader had reached ``L_i`` at step ``s_i`` (read off the leader's
evaluations, linear in ``ln s`` between the two around ``L_i``); the trial needs ``c_i = t_i/s_i``
times the leader's steps to reach the same loss. Its steps to target are projected as
``c·S_leader``, ``c`` the geometric mean of the ``c_i``.

That is exact when the two curves differ by a factor in time (the steps to every loss level
scaled alike, as the simulator's trials are, ``cbscore.study.simulate``), and biased where their
shapes differ (a rate whose curve flattens earlier, as a large constant learning rate's does). ``docs/results/cheaper-search`` measures that bias on the lab's own
curves; ``cbs study simulate`` measures what it does to B*.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

from cbscore.analysis._target import EvalHistory
from cbscore.analysis._trial import REACHED, TrialSteps

#: Evaluations of the stopped trial that give ``c``: its last ones (the nearest the target).
PROJECTION_POINTS = 3


def step_at_loss(steps: Sequence[float], losses: Sequence[float], level: float) -> float | None:
    """First step at which a curve reached ``level``, linear in ``ln step`` between the evaluations
    around it; ``None`` if it never did or did so before its first evaluation."""
    for j, value in enumerate(losses):
        if not math.isfinite(value):
            return None
        if value <= level:
            if j == 0:
                return None
            s0, s1, l0, l1 = steps[j - 1], steps[j], losses[j - 1], value
            if l0 == l1:
                return float(s1)
            w = (l0 - level) / (l0 - l1)
            if s0 <= 0:  # an evaluation at step 0 (before training): linear in steps there
                return float(s0 + w * (s1 - s0))
            return float(math.exp(math.log(s0) + w * math.log(s1 / s0)))
    return None


def steps_ratio(steps: Sequence[float], losses: Sequence[float], leader_steps: Sequence[float],
                leader_losses: Sequence[float], *, points: int = PROJECTION_POINTS) -> float | None:
    """``c``: how many times the leader's steps the trial needs to reach its own last losses (module
    docstring); ``None`` where fewer than two of its last ``points`` evaluations are matched."""
    ratios = []
    for t, level in list(zip(steps, losses))[-points:]:
        if not (math.isfinite(level) and t > 0):
            continue
        s = step_at_loss(leader_steps, leader_losses, level)
        if s is not None and s > 0:
            ratios.append(t / s)
    if len(ratios) < 2:
        return None
    return math.exp(sum(math.log(c) for c in ratios) / len(ratios))


def project_pruned(trials: Sequence[TrialSteps], histories: Iterable[EvalHistory]) -> list[TrialSteps]:
    """``trials`` with :attr:`TrialSteps.steps_projected` set on every ``pruned`` trial whose history
    and its cell's leader's (the seed's reached trial with the fewest steps) are both in
    ``histories`` (matched by batch size, rate, seed and outcome)."""
    by_key: dict[tuple, EvalHistory] = {}
    for h in histories:
        by_key[(h.batch_size, h.lr, h.seed, h.outcome)] = h
    leaders: dict[tuple, TrialSteps] = {}
    for t in trials:
        if t.outcome != REACHED:
            continue
        key = (t.batch_size, t.seed)
        if key not in leaders or t.steps < leaders[key].steps:
            leaders[key] = t
    out = []
    for t in trials:
        lead = leaders.get((t.batch_size, t.seed))
        h = by_key.get((t.batch_size, t.lr, t.seed, "pruned"))
        if t.outcome == "pruned" and lead is not None and h is not None:
            lh = by_key.get((lead.batch_size, lead.lr, lead.seed, REACHED))
            c = steps_ratio(h.steps, h.losses, lh.steps, lh.losses) if lh is not None else None
            if c is not None:
                t = dataclasses.replace(t, steps_projected=c * lead.steps)
        out.append(t)
    return out

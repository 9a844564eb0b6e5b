"""Stopping losing trials at equal tokens (``stop_far_rates`` and ``prune_at_equal_tokens``).

Within a cell every trial has the same batch size, so equal tokens are equal steps. At a running
trial's last evaluation, step ``t``, its held-out loss (EWA weights, best τ) is compared with the
lowest loss any other trial of its seed had at ``t`` (read off that trial's evaluations, linear in
``ln t`` between the two around it). A trial outside that leader's fit window that trails it by
more than a margin stops as ``pruned``, before the cell's best has crossed the target:
``far_rate_margin`` from ``far_rate_fraction`` of the cell's expected steps on, never a re-run,
with ``stop_far_rates`` alone (the curves cross over earlier in a run; nothing is projected, and
a stopped rate that a later best makes its neighbour is run again by the planner);
``equal_token_margin`` at any step with ``prune_at_equal_tokens``, which also stops the fit's own
rates as below.

Near the target a held-out loss falls about linearly in ``ln t`` (a local power law, Kaplan et al.
2020, arXiv 2001.08361, eq. 5.6), so a gap of ``δ`` nats at equal steps is a factor of about
``exp(δ/κ)`` in steps to target, ``κ = −dL/d ln t`` (0.1–0.3 nats per e-fold in the lab's runs).
The rates the cell's fit reads are not stopped by that margin (the window around the best
crossing so far and, before any crossing, the window around the leader at equal tokens,
``cbscore.analysis.window_rates``); they are stopped later, by :func:`projectable_stops`: once a
trial has trained ``equal_token_fraction`` of the cell's expected steps and needs more than
:data:`MIN_RATIO` times the leader's steps to reach each of its own last losses, its steps to
target are projected from that ratio (``cbscore.analysis.project_pruned``) and it stops. The
fastest trial of each seed always runs to the target.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Collection, Sequence

from cbscore.analysis import step_at_loss, steps_ratio, window_rates
from cbscore.study.trials import TrialRecord

#: A trial is projected and stopped only when it needs more than this multiple of the leader's
#: steps to reach its own losses: two curves closer than that are the same rate within noise, and
#: both run on.
MIN_RATIO = 1.02


def loss_at_step(steps: Sequence[float], losses: Sequence[float], at: float, n: int | None = None) -> float | None:
    """Held-out loss at step ``at`` read off evaluations ``(steps, losses)``: linear in ``ln step``
    between the two evaluations around it; ``None`` outside the evaluated range. ``n``: read only the
    first ``n`` evaluations (a running trial's in the simulator, without a copy of them)."""
    n = len(steps) if n is None else n
    if not n or at < steps[0] or at > steps[n - 1]:
        return None
    j = bisect.bisect_left(steps, at, 0, n)
    if steps[j] == at:
        return float(losses[j])
    s0, s1, l0, l1 = steps[j - 1], steps[j], losses[j - 1], losses[j]
    if not (math.isfinite(l0) and math.isfinite(l1)):
        return None
    # (Linear in steps from an evaluation at step 0, before training.)
    w = (at - s0) / (s1 - s0) if s0 <= 0 else math.log(at / s0) / math.log(s1 / s0)
    return float(l0 + w * (l1 - l0))


def equal_token_stops(recs: Sequence[TrialRecord], *, margin_nats: float, protected: Collection[tuple[int, float]],
                      skip: Collection[str] = (), min_step: float = 0.0, rates: Collection[float] = ()) -> list[str]:
    """Trial ids of the running trials of one cell to stop (module docstring). ``protected``:
    ``(seed, rate)`` never stopped (the fit's window around the best crossing); ``skip``: trial
    ids not to judge now (a lost trial about to be run again); ``min_step``: trials whose last
    evaluation is earlier are not judged yet (``far_rate_fraction`` of the expected steps);
    ``rates``: the cell's planned rates, not all started yet (the window is over them too)."""
    out = []
    tried = None  # (the rates tried, read where a trial trails by the margin: few calls)
    for r in recs:
        if r.status != "running" or not r.eval_steps or r.trial_id in skip or (r.seed, r.lr) in protected:
            continue
        if r.eval_steps[-1] < min_step:
            continue
        t, mine = r.eval_steps[-1], r.eval_losses[-1]
        if not math.isfinite(mine):
            continue
        leader, lead_lr = math.inf, None
        for o in recs:
            o_steps = o.eval_steps
            # (loss_at_step's own range check first: most trials are read outside each other's range.)
            if (o is r or o.seed != r.seed or o.status in ("diverged", "failed") or not o_steps
                    or t < o_steps[0] or t > o_steps[-1]):
                continue
            got = loss_at_step(o_steps, o.eval_losses, t)
            if got is not None and got < leader:
                leader, lead_lr = got, o.lr
        if lead_lr is None or mine - leader <= margin_nats:
            continue
        # Before the best has crossed, the leader's window is what the fit will read.
        if tried is None:
            tried = sorted({r.lr for r in recs} | set(rates))
        if r.lr in window_rates(tried, lead_lr):
            continue
        out.append(r.trial_id)
    return out


def projectable_stops(recs: Sequence[TrialRecord], *, fraction: float, expected_steps: float | None,
                      skip: Collection[str] = ()) -> list[str]:
    """Trial ids of running trials of one cell that trained ``fraction`` of ``expected_steps`` and
    trail their seed's leader by a steps ratio above :data:`MIN_RATIO` (module docstring). The
    leader is the trial of the seed that reached the trial's latest loss in the fewest steps."""
    if expected_steps is None or expected_steps <= 0:
        return []
    out = []
    for r in recs:
        if r.status != "running" or len(r.eval_steps) < 2 or r.trial_id in skip:
            continue
        t, level = r.eval_steps[-1], r.eval_losses[-1]
        if t < fraction * expected_steps or not math.isfinite(level):
            continue
        lead, lead_at = None, t
        for o in recs:
            if o is r or o.seed != r.seed or o.status in ("diverged", "failed") or not o.eval_steps:
                continue
            at = step_at_loss(o.eval_steps, o.eval_losses, level)
            if at is not None and at < lead_at:
                lead, lead_at = o, at
        if lead is None:
            continue
        c = steps_ratio(r.eval_steps, r.eval_losses, lead.eval_steps, lead.eval_losses)
        if c is not None and c > MIN_RATIO:
            out.append(r.trial_id)
    return out

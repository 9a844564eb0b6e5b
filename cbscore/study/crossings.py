"""Where a cell's trials crossed the target: read off each record's evaluations (cached for ended
records), each seed's fewest steps, and the best rate's neighbours that pruning never cuts."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from cbscore.analysis import first_crossing, window_rates
from cbscore.study.trials import TrialRecord

#: Crossings read off trials' evaluations, by (trial, its state or evaluations so far, target): the
#: planner asks again at every call.
_CROSSINGS: dict[tuple, float | None] = {}
_UNREAD = object()


def record_crossing(record: TrialRecord, target: float) -> float | None:
    """Steps at which ``record`` crossed ``target`` (its own steps to target once reached), ``None``
    if it has not."""
    if record.status == "reached" and record.steps_to_target is not None:
        return record.steps_to_target
    if record.status in ("diverged", "failed") or not record.eval_steps:
        return None
    # A running trial's evaluations only grow: its count and its last one name what it has so far
    # (with its attempt, since a lost trial resumes from a checkpoint). An ended one never changes.
    key = ((record.trial_id, record.status, record.last_step, len(record.eval_steps), record.eval_losses[-1], target)
           if record.terminal else
           (record.trial_id, "running", record.attempt, len(record.eval_steps), record.eval_steps[-1],
            record.eval_losses[-1], target))
    # (One read, and a local after: another thread's planner may empty the dict meanwhile.)
    crossing = _CROSSINGS.get(key, _UNREAD)
    if crossing is not _UNREAD:
        return crossing
    crossing = None if _never_at_target(record, target) else first_crossing(record.eval_steps, record.eval_losses, target)
    if len(_CROSSINGS) >= 100_000:
        _CROSSINGS.clear()
    _CROSSINGS[key] = crossing
    return crossing


def _never_at_target(record: TrialRecord, target: float) -> bool:
    """Whether none of ``record``'s evaluations is a finite loss at or below ``target``: then
    :func:`cbscore.analysis.first_crossing` finds no crossing (its step 1), which is read here
    without the copies it makes of the evaluations (a running trial's are read again at each new
    one). Only float losses at int or float steps against a finite float target, as many steps as
    losses; anything else goes to ``first_crossing`` as it is (it checks and converts them)."""
    steps, losses = record.eval_steps, record.eval_losses
    if type(target) is not float or not math.isfinite(target) or len(losses) != len(steps):
        return False
    for v in losses:
        if type(v) is not float or v <= target:
            return False
    return all(type(s) is float or type(s) is int for s in steps)


def best_steps_by_seed(recs: Iterable[TrialRecord], target: float | None) -> dict[int, float]:
    """Fewest steps to target per seed among ``recs``."""
    out: dict[int, float] = {}
    if target is None:
        return out
    for r in recs:
        c = record_crossing(r, target)
        if c is not None:
            out[r.seed] = min(out.get(r.seed, math.inf), c)
    return out


def best_neighbours(recs: Sequence[TrialRecord], target: float | None,
                    rates: Sequence[float] = ()) -> set[tuple[int, float]]:
    """``(seed, rate)`` of each seed's best rate so far and the rates next to it in the cell: never
    pruned, since ``S(B)`` is read off a fit through them (:func:`cbscore.analysis.measure_points`,
    ``window_rates``), and the full grid would have them."""
    out: set[tuple[int, float]] = set()
    by_seed: dict[int, list[TrialRecord]] = {}
    for r in recs:
        by_seed.setdefault(r.seed, []).append(r)
    for seed, mine in by_seed.items():
        scored = [(c, r.lr) for r in mine if (c := record_crossing(r, target)) is not None] if target is not None else []
        if not scored:
            continue
        tried = sorted({r.lr for r in mine} | set(rates))
        at = tried.index(min(scored)[1])
        out |= {(seed, lr) for lr in window_rates(tried, tried[at])}
    return out

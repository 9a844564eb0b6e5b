"""Where a cell's trials crossed the target: read off each record's evaluations (:class:`Crossings`
keeps what one planner read), each seed's fewest steps, and the best rate's neighbours that pruning
never cuts."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from cbscore.analysis import first_crossing, window_rates
from cbscore.study.trials import TrialRecord

#: How a rule reads a record's crossing of a target: :func:`record_crossing`, or a planner's
#: :meth:`Crossings.of`.
CrossingReader = Callable[[TrialRecord, float], "float | None"]


def record_crossing(record: TrialRecord, target: float) -> float | None:
    """Steps at which ``record`` crossed ``target`` (its own steps to target once reached), ``None``
    if it has not."""
    if record.status == "reached" and record.steps_to_target is not None:
        return record.steps_to_target
    if record.status in ("diverged", "failed") or not record.eval_steps:
        return None
    return None if _never_at_target(record, target) else first_crossing(record.eval_steps, record.eval_losses, target)


class Crossings:
    """The crossings one planner read (:class:`cbscore.study.planner.Planner`, one per study, and the
    cells it composes): by trial and target, the record read and where it crossed. A record is never
    changed once made, so the very record read before crossed where it did; any other (a running
    trial's next record, an ended trial's) is read afresh. The planner calls again and again on the
    same ended records and on running ones with no new evaluation: each is read once."""

    __slots__ = ("_read",)

    def __init__(self) -> None:
        self._read: dict[tuple[str, float], tuple[TrialRecord, float | None]] = {}

    def of(self, record: TrialRecord, target: float) -> float | None:
        """:func:`record_crossing` of ``record``, read once per record object and target."""
        if record.status == "reached" and record.steps_to_target is not None:
            return record.steps_to_target
        key = (record.trial_id, target)
        read = self._read.get(key)
        if read is not None and read[0] is record:
            return read[1]
        crossing = record_crossing(record, target)
        self._read[key] = (record, crossing)
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
    # (Read in C first, where it holds, most calls: only floats, their min above the target. min skips
    # a NaN as v <= target does, but for a NaN first: then, and otherwise, the loop decides.)
    if losses and _FLOAT >= set(map(type, losses)) and min(losses) > target:
        return _NUMBER >= set(map(type, steps))
    for v in losses:
        if type(v) is not float or v <= target:
            return False
    return all(type(s) is float or type(s) is int for s in steps)


_FLOAT, _NUMBER = frozenset((float,)), frozenset((float, int))


def best_steps_by_seed(recs: Iterable[TrialRecord], target: float | None,
                       crossing: CrossingReader = record_crossing) -> dict[int, float]:
    """Fewest steps to target per seed among ``recs`` (each crossing read by ``crossing``)."""
    out: dict[int, float] = {}
    if target is None:
        return out
    for r in recs:
        c = crossing(r, target)
        if c is not None:
            out[r.seed] = min(out.get(r.seed, math.inf), c)
    return out


def best_neighbours(recs: Sequence[TrialRecord], target: float | None,
                    rates: Sequence[float] = (), crossing: CrossingReader = record_crossing) -> set[tuple[int, float]]:
    """``(seed, rate)`` of each seed's best rate so far and the rates next to it in the cell: never
    pruned, since ``S(B)`` is read off a fit through them (:func:`cbscore.analysis.measure_points`,
    ``window_rates``), and the full grid would have them."""
    out: set[tuple[int, float]] = set()
    by_seed: dict[int, list[TrialRecord]] = {}
    for r in recs:
        by_seed.setdefault(r.seed, []).append(r)
    for seed, mine in by_seed.items():
        scored = [(c, r.lr) for r in mine if (c := crossing(r, target)) is not None] if target is not None else []
        if not scored:
            continue
        tried = sorted({r.lr for r in mine} | set(rates))
        at = tried.index(min(scored)[1])
        out |= {(seed, lr) for lr in window_rates(tried, tried[at])}
    return out

"""When a running trial stops early: one small rule per spec field that asks for it, each with one job.

Each rule's ``stops(cell, stopping)`` names the running trials of one released trial cell that it
stops now as ``pruned`` (its :attr:`rule` is the ``stopped_by`` tag, ``plan_result.STOP_RULES``),
given what the cell planner read off the cell (:class:`RunningCell`) and the trials earlier rules
stop at this call (``stopping``). :func:`stop_rules` lists a spec's rules in the order they judge:

* :class:`PruneMargin` (``prune_margin``, always): still above the target at an evaluation well
  past its seed's best crossing;
* :class:`FarRates` (``stop_far_rates``): outside the fit's window, trailing its seed's leader at
  equal tokens (:mod:`cbscore.study.equal_tokens`);
* :class:`EqualTokenMargin` and :class:`EqualTokenFraction` (``experimental.prune_at_equal_tokens``,
  in place of :class:`FarRates`): trailing at any step, and the fit's own rates once projectable.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from cbscore.study.budgets import RERUN_SUFFIX, cell_budget_tokens
from cbscore.study.crossings import CrossingReader, best_neighbours, record_crossing
from cbscore.study.equal_tokens import equal_token_stops, projectable_stops
from cbscore.study.spec import StudySpec
from cbscore.study.spec_parts import Setting
from cbscore.study.trials import TrialRecord


class _read_once:
    """``functools.cached_property`` without its lock (Python 3.11 takes one at each first read: a
    :class:`RunningCell` is made at most of a study's plans, read by one thread): the value is kept in
    the instance's ``__dict__`` under the same name, which later reads find first."""

    def __init__(self, fn):
        self.fn, self.name, self.__doc__ = fn, fn.__name__, fn.__doc__

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


@dataclass
class RunningCell:
    """What the stop rules read off one released trial cell with a running trial."""

    spec: StudySpec
    setting: Setting
    batch_size: int
    recs: Sequence[TrialRecord]
    target: float | None
    seed_best: dict[int, float]
    """Each seed's fewest steps to target so far (:func:`cbscore.study.crossings.best_steps_by_seed`)."""
    best: float | None
    """The cell's fewest steps to target so far."""
    rates: Sequence[float]
    """The cell's planned rates (a grid's; none in an Optuna cell)."""
    prev_best: float | None
    """The next smaller batch size's steps to target, where known."""
    cap: int | None
    """The cell's step cap."""
    lost: frozenset
    """Trials whose heartbeat went stale: run again, never judged."""
    crossing: CrossingReader = record_crossing
    """How a record's crossing is read (its planner's :class:`cbscore.study.crossings.Crossings`)."""

    @_read_once
    def keep(self) -> set[tuple[int, float]]:
        """``(seed, rate)`` of each seed's best rate and its neighbours: never stopped early (the fit
        reads them)."""
        return best_neighbours(self.recs, self.target, self.rates, self.crossing) if self.seed_best else set()

    @_read_once
    def expected_steps(self) -> float:
        """The cell's expected steps: its best crossing so far, else the next smaller batch size's S,
        else its budget's share (what the trials were planned for)."""
        if self.best is not None:
            return self.best
        if self.prev_best is not None:
            return self.prev_best
        spec, b = self.spec, self.batch_size
        steps_budget = cell_budget_tokens(spec, self.setting, b, "trial", self.cap) // (b * spec.context_tokens)
        return steps_budget / (1 + spec.budget_margin)


@dataclass(frozen=True)
class PruneMargin:
    """Trials still above the target at an *evaluation* past ``(1 + prune_margin)``·the best crossing
    of their own seed (seeds are repeats: one seed's luck never stops another's trials). Steps
    trained since the last evaluation say nothing: the trial may have crossed."""

    margin: float
    rule = "prune_margin"

    def stops(self, cell: RunningCell, stopping: Collection[str]) -> list[str]:
        if not cell.seed_best:
            return []
        out = []
        for r in cell.recs:
            own = cell.seed_best.get(r.seed)
            if own is None or r.status != "running" or r.trial_id in cell.lost:
                continue
            last_eval = r.eval_steps[-1] if r.eval_steps else 0.0
            # (The best's neighbours, read off every crossing of the cell, only where a trial is past its margin.)
            if last_eval > (1 + self.margin) * own and (r.seed, r.lr) not in cell.keep:
                out.append(r.trial_id)
        return out


@dataclass(frozen=True)
class FarRates:
    """``stop_far_rates``: a trial outside the fit's window that trails its seed's leader at equal steps
    by ``far_rate_margin``, judged only from ``far_rate_fraction`` of the cell's expected steps (the
    curves stopped crossing over) and never a re-run (the last attempt: a stopped re-run that a later
    best makes its neighbour would leave the fit's window short). A stopped rate that a later best
    makes its neighbour is run again (:mod:`cbscore.study.cell_done`)."""

    margin_nats: float
    fraction: float
    rule = "stop_far_rates"

    def stops(self, cell: RunningCell, stopping: Collection[str]) -> list[str]:
        min_step = self.fraction * cell.expected_steps
        # No running trial evaluated from its fraction on (most calls): none is judged, and the best's
        # neighbours (read off every crossing of the cell) are not needed.
        if not any(r.status == "running" and r.eval_steps and not r.eval_steps[-1] < min_step for r in cell.recs):
            return []
        reruns = {r.trial_id for r in cell.recs if r.trial_id.endswith(RERUN_SUFFIX)}
        return equal_token_stops(cell.recs, margin_nats=self.margin_nats, protected=cell.keep,
                                 skip=cell.lost | set(stopping) | reruns, min_step=min_step, rates=cell.rates)


@dataclass(frozen=True)
class EqualTokenMargin:
    """``experimental.prune_at_equal_tokens``: a trial outside the fit's window that trails its seed's
    leader at equal steps by ``equal_token_margin``, at any step."""

    margin_nats: float
    rule = "equal_token_margin"

    def stops(self, cell: RunningCell, stopping: Collection[str]) -> list[str]:
        return equal_token_stops(cell.recs, margin_nats=self.margin_nats, protected=cell.keep,
                                 skip=cell.lost | set(stopping), min_step=0.0, rates=cell.rates)


@dataclass(frozen=True)
class EqualTokenFraction:
    """``experimental.prune_at_equal_tokens``: the fit's own rates, stopped once they trained
    ``equal_token_fraction`` of the cell's expected steps and their steps to target can be projected."""

    fraction: float
    rule = "equal_token_fraction"

    def stops(self, cell: RunningCell, stopping: Collection[str]) -> list[str]:
        return projectable_stops(cell.recs, fraction=self.fraction, expected_steps=cell.expected_steps,
                                 skip=cell.lost | set(stopping))


StopRule = PruneMargin | FarRates | EqualTokenMargin | EqualTokenFraction


def stop_rules(spec: StudySpec) -> tuple[StopRule, ...]:
    """The spec's stop rules, in the order they judge (module docstring)."""
    rules: list[StopRule] = [PruneMargin(spec.prune_margin)]
    if spec.experimental.prune_at_equal_tokens:
        rules += [EqualTokenMargin(spec.equal_token_margin), EqualTokenFraction(spec.equal_token_fraction)]
    elif spec.stop_far_rates:
        rules.append(FarRates(spec.far_rate_margin, spec.far_rate_fraction))
    return tuple(rules)

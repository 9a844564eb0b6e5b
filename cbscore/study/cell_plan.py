"""One cell of :func:`cbscore.study.planner.plan`: whether it is released, its step cap, the
trials to start, ask for, re-run or stop, and the chain state it hands to the next batch size.

A :class:`CellPlanner` composes the cell's small rules, each with one job: which rates it runs next
(its search kind, :mod:`cbscore.study.rate_rules`), when a running rate stops
(:mod:`cbscore.study.stop_rules`), and when the cell is done: its re-runs, whether it is skipped and
its state (:mod:`cbscore.study.cell_done`). What the cell reads off its smaller neighbours is its
:class:`CellInputs`; what it hands on, its :class:`ChainState`.

Savings that do not change the answer: in a cell, once a trial reached the target at S steps,
trials still above it at an evaluation past ``S·(1 + prune_margin)`` stop as ``pruned``, and later
trials of the cell start with that cap (only evaluated steps count: a trial may have crossed since
its last evaluation); a cell is ``skipped`` once a smaller batch size ended with every trial
censored after at least this cell's token budget (:func:`cbscore.study.cell_done.skipped`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from cbscore.study.budgets import RERUN_CAP_FACTOR, RERUN_SUFFIX, RERUN_TAG
from cbscore.study.cell_done import cell_state, censored_bound, first_attempts, reruns, skipped
from cbscore.study.cell_trials import cell_id, cell_recipe, make_trial, make_trial_id, study_data
from cbscore.study.chained import replicate_seeds, settled_best, split_replicates
from cbscore.study.crossings import Crossings, best_neighbours, best_steps_by_seed
from cbscore.study.plan_result import AskRequest, CellState
from cbscore.study.rate_rules import rate_rule
from cbscore.study.spec import StudySpec
from cbscore.study.spec_parts import Setting
from cbscore.study.stop_rules import RunningCell, stop_rules
from cbscore.study.trials import TERMINAL, TrialRecord, TrialSpec, built, lr_tag, replaced


class ChainState(NamedTuple):
    """What a cell hands the next batch size of its setting (a tuple: the planner compares it at
    every cell of every call)."""

    resolved: bool = True
    """The cell is resolved (or skipped): the next one may be released."""
    best_steps: float | None = None
    """Fewest steps to target of the nearest smaller batch size that has one (its own measurement: a
    running minimum over many noisy cells is biased low): the next cell's step cap."""
    at_least_tokens: float = 0.0
    """A lower bound on tokens to target from the smaller batch sizes: ``E(B) >`` this."""


class CellInputs(NamedTuple):
    """What a cell's plan reads besides its own records (a tuple, as :class:`ChainState`)."""

    target: float | None
    """The setting's target loss, where known."""
    chain: ChainState
    """What the next smaller batch size handed on."""
    setting_failed: bool
    """The setting cannot go on (no target): nothing is released."""
    centre: float | None = None
    """The planner's guess of the cell's best rate (:mod:`cbscore.study.rate_rules`)."""


@dataclass(frozen=True)
class CellPlan:
    """What :func:`cbscore.study.planner.plan` decides for one cell, and the chain state it hands to the
    next batch size."""

    cell: CellState
    start: tuple = ()
    ask: tuple = ()
    stop: tuple = ()
    stopped_by: tuple = ()
    """``(trial_id, rule)`` for each of ``stop`` (``plan_result.STOP_RULES``)."""
    incomplete: bool = False
    skipped: bool = False
    chain: ChainState = ChainState()
    released: bool = False
    """The cell may start trials (its stop rules judge its running ones)."""
    rates: tuple = ()
    """A grid cell's rates, as planned."""
    ordered: bool = False
    """It starts first attempts, in its rate rule's order (which may read the centre)."""
    read: dict = field(default_factory=dict, compare=False, repr=False)
    """What the stop rules read off the cell's crossings (``seed_best``, ``keep``), kept for
    :meth:`CellPlanner.restop`: while only trials that have not ended move and none crosses, no
    crossing moves (this plan and the plans restop makes from it share it)."""

    def reads_centre(self, rule) -> bool:
        """Whether the plan reads its inputs' centre: under a rule that reads it only to order the
        trials it starts (:meth:`cbscore.study.rate_rules.GridRates.orders_only`), only while it starts some."""
        return self.ordered or not rule.orders_only()


def record_key(r: TrialRecord, lost_set: frozenset) -> tuple:
    """Everything of a record that a :class:`CellPlanner` reads (an ended record's evaluations never
    change). A running trial's steps and tokens since its last evaluation are left out: pruning and
    the comparisons at equal tokens read evaluations only, so between two evaluations it plans the same."""
    running = r.status not in TERMINAL  # (not r.terminal)
    return (r.trial_id, r.status, r.attempt, r.steps_to_target, None if running else r.last_step,
            None if running else r.tokens, r.max_steps, r.final_eval_loss, len(r.eval_steps),
            r.eval_steps[-1] if r.eval_steps else None, r.eval_losses[-1] if r.eval_losses else None,
            r.trial_id in lost_set)


class CellPlanner:
    """The plan of one cell ``(setting, batch size)`` from its records and :class:`CellInputs`."""

    def __init__(self, spec: StudySpec, setting: Setting, batch_size: int, *, configs: bool = True,
                 crossings: Crossings | None = None):
        self.spec, self.setting, self.batch_size = spec, setting, batch_size
        self.configs = configs
        """Whether the trials it starts carry the trainer's config (:class:`cbscore.study.planner.Planner`)."""
        self.crossing = (crossings if crossings is not None else Crossings()).of
        """How its rules read a record's crossing: its planner's :class:`Crossings` (one per study,
        shared by its cells), else its own."""
        self.cell_id = cell_id(setting.setting_id, batch_size)
        self.rates = rate_rule(spec, batch_size)
        self.role = self.rates.role
        self.orders_only = self.rates.orders_only()
        """Whether its rule reads the centre only to order the trials it starts (:meth:`CellPlan.reads_centre`,
        read at every cell of every call of the planner)."""
        self.stops = stop_rules(spec)
        self.replicates = (replicate_seeds(spec) if spec.search.kind == "chained" and self.role == "trial"
                           and batch_size in spec.replicated_batch_sizes else ())
        """The new training seeds of the cell's replicates (:mod:`cbscore.study.chained`), or none."""
        self._recipe: tuple[float, tuple[float, ...]] | None = None
        self._ids: dict[float, tuple[str, ...]] = {}
        self._ids_of: dict[tuple[float, ...], frozenset[str]] = {}
        self._data = None

    @property
    def recipe(self) -> tuple[float, tuple[float, ...]]:
        """The cell's ``(β2, τ tracked)`` (:func:`cbscore.study.cell_trials.cell_recipe`), read once."""
        if self._recipe is None:
            self._recipe = cell_recipe(self.spec, self.setting, self.batch_size)
        return self._recipe

    @property
    def data(self):
        """The spec's data config (:func:`cbscore.study.cell_trials.study_data`), read once."""
        if self._data is None:
            self._data = study_data(self.spec)
        return self._data

    def _trial_ids(self, lr: float) -> tuple[str, ...]:
        """The ids of the cell's trials at rate ``lr``, one per seed (worked out once per rate)."""
        ids = self._ids.get(lr)
        if ids is None:
            ids = self._ids[lr] = tuple(make_trial_id(self.spec, self.setting, self.batch_size, lr_tag(lr), seed)
                                        for seed in self.spec.seeds)
        return ids

    def _rates_ids(self, rates: Sequence[float]) -> frozenset[str]:
        """The ids of the cell's trials at each of ``rates`` (:meth:`_trial_ids`), worked out once per
        rates planned (a cell plans the same few again and again)."""
        rates = tuple(rates)
        ids = self._ids_of.get(rates)
        if ids is None:
            ids = self._ids_of[rates] = frozenset(tid for lr in rates for tid in self._trial_ids(lr))
        return ids

    def _config_parts(self) -> dict:
        """What ``make_trial`` builds a trainer config from (the cell's recipe, the spec's data), read
        only where the trials carry one."""
        return {"recipe": self.recipe, "data": self.data} if self.configs else {}

    def cap(self, chain: ChainState, best: float | None) -> tuple[int | None, int | None]:
        """``(the cell's step cap, the cap of the best rate's neighbours)``: steps to target do not grow
        with B, so a trial cell never needs more than ``(1 + budget_margin)·S`` of the next smaller
        measured batch size, nor (once its own best is known) ``(1 + prune_margin)·`` its best; the
        best rate's neighbours are never cut at the prune margin. The reference cell has none."""
        if self.role != "trial":
            return None, None
        spec = self.spec
        # (min(smaller, own) of those known: the min of a list of them, without building it.)
        smaller = (1 + spec.budget_margin) * chain.best_steps if chain.best_steps is not None else None
        cap_smaller = int(math.ceil(smaller - 1e-9)) if smaller is not None else None
        if best is None:
            return cap_smaller, cap_smaller
        own = (1 + spec.prune_margin) * best
        low = own if smaller is None else min(smaller, own)
        return int(math.ceil(low - 1e-9)), cap_smaller  # 1.1·200 is 220.00000000000003

    def plan(self, recs: Sequence[TrialRecord], inputs: CellInputs, lost: frozenset, *,
             centre_of: Callable[[], float | None] | None = None) -> CellPlan:
        """The cell's state, the trials to start, ask for or stop, and the chain state it hands on.
        ``centre_of``: under a rule that reads the centre only to order the first attempts it starts
        (:attr:`orders_only`), the centre where ``inputs`` leaves it out, read only there."""
        if centre_of is not None and not self.orders_only:
            raise ValueError("centre_of applies to a rule that reads the centre only to order its trials")
        if not self.replicates:
            return self._plan(recs, inputs, lost, centre_of)
        main, reps = split_replicates(self.spec, recs)
        return self._with_replicates(self._plan(main, inputs, lost, centre_of), main, reps, inputs)

    def _with_replicates(self, out: CellPlan, main: Sequence[TrialRecord], reps: Sequence[TrialRecord],
                         inputs: CellInputs) -> CellPlan:
        """``out`` (the plan of the cell's spec seeds) with its replicates: once those settled with a
        best rate, one trial per replicate seed at that rate, to its crossing under the cap of the best
        rate's neighbours; never stopped, and read by nothing the chain hands on (``out.chain``)."""
        spec, b = self.spec, self.batch_size
        settled, rate = (settled_best(spec, main, "trial", inputs.centre, b) if out.released and inputs.centre
                         else (False, None))
        present = {r.seed for r in reps}
        start = []
        if settled and rate is not None:
            cap_smaller = self.cap(inputs.chain, out.cell.steps_to_target)[1]
            start = [make_trial(spec, self.setting, batch_size=b, role=self.role, lr=rate, seed=seed, tag=lr_tag(rate),
                                max_steps=cap_smaller, target_loss=inputs.target, with_config=self.configs,
                                **self._config_parts())
                     for seed in self.replicates if seed not in present]
        # None runs where the cell settled without a best rate (no seed reached).
        needed = 0 if settled and rate is None else len(self.replicates)
        pending = len(reps) < needed or not all(r.terminal for r in reps)
        counts = dict(out.cell.counts)
        for r in reps:
            counts[r.status] = counts.get(r.status, 0) + 1
        cell = replaced(out.cell, counts=counts, n_trials=out.cell.n_trials + (needed if out.rates else 0),
                         state="resolved" if pending and out.cell.state == "done" else out.cell.state)
        return replaced(out, cell=cell, start=out.start + tuple(start),
                         incomplete=out.incomplete or (pending and not inputs.setting_failed))

    def _plan(self, recs: Sequence[TrialRecord], inputs: CellInputs, lost: frozenset,
              centre_of: Callable[[], float | None] | None = None) -> CellPlan:
        """:meth:`plan` of the cell's spec seeds."""
        spec, setting, b, role = self.spec, self.setting, self.batch_size, self.role
        grid = spec.search.runs_rates
        target, chain, centre = inputs.target, inputs.chain, inputs.centre
        cell_target = None if role == "reference" else target
        # Every cell's crossings of the target, the reference cell's too (S(B_ref) is measured
        # like any other, and caps the cell above it).
        seed_best = best_steps_by_seed(recs, target, self.crossing)
        best = min(seed_best.values()) if seed_best else None
        rates, pending = self.rates.rates(recs, centre)
        n_cell = self.rates.size(rates)
        released = self.rates.released(target, chain.resolved, centre) and not inputs.setting_failed
        cap, cap_smaller = self.cap(chain, best)
        if (released and role == "trial" and not recs and not inputs.setting_failed
                and skipped(spec, setting, b, cap, chain.at_least_tokens)):
            # Resolved for the chain; the bound carries over unchanged.
            state = CellState(cell_id=self.cell_id, setting_id=setting.setting_id, batch_size=b, role=role,
                              state="skipped", n_trials=n_cell, counts={}, steps_to_target=None, max_steps=cap)
            return CellPlan(cell=state, skipped=True, chain=chain)
        first = first_attempts(recs)
        first_done = len(first) >= n_cell and all(r.terminal for r in first) and not pending
        rerun = reruns(spec, role, recs, first, target, best, rates, self.crossing) if grid and first_done else []
        n_cell += len(rerun)
        # Complete only once every re-run it asks for exists: counting is not enough (the re-runs of
        # an all-censored cell outnumber the neighbours a later best asks for).
        present = {r.trial_id for r in recs}
        reruns_started = all(r.trial_id + "." + RERUN_TAG in present for r in rerun)
        complete = len(recs) >= n_cell and all(r.terminal for r in recs) and not pending and reruns_started
        at_least = chain.at_least_tokens
        if (best is None and complete and target is not None
                and all(r.status in ("censored", "diverged") for r in recs)):
            at_least = censored_bound(recs, at_least)
        counts: dict[str, int] = {}
        for r in recs:
            counts[r.status] = counts.get(r.status, 0) + 1
        read = {"seed_best": seed_best}
        start: list[TrialSpec] = []
        asks: list[AskRequest] = []
        stop: tuple[tuple[str, str], ...] = ()
        if released:
            if grid:
                start = self._grid_trials(recs, present, rates, centre, seed_best, target, cap, cap_smaller,
                                          rerun, cell_target, centre_of)
            else:
                active = sum(1 for r in recs if not r.terminal)
                count = min(n_cell - len(recs), spec.search.parallel_per_cell - active)
                if count > 0:
                    asks.append(AskRequest(cell_id=self.cell_id, setting_id=setting.setting_id, batch_size=b,
                                           role=role, count=count, first_number=len(recs), max_steps=cap,
                                           target_loss=cell_target))
            stop = self._stops(recs, target, seed_best, best, rates if grid else (), chain, cap, lost, read,
                               running="running" in counts)
        state, resolved = cell_state(role, complete, first_done, best, target, released)
        # (CellState(...) and CellPlan(...), every field given in order: built without their __init__.)
        cell = built(CellState, cell_id=self.cell_id, setting_id=setting.setting_id, batch_size=b, role=role,
                     state=state, n_trials=n_cell, counts=counts, steps_to_target=best, max_steps=cap,
                     rates_note=self.rates.note(recs, rates, centre))
        return built(CellPlan, cell=cell, start=tuple(start), ask=tuple(asks),
                     stop=tuple((tid, "pruned") for tid, _ in stop), stopped_by=stop,
                     incomplete=not complete and not inputs.setting_failed, skipped=False,
                     chain=ChainState(resolved, best if best is not None else chain.best_steps, at_least),
                     released=released, rates=rates if grid else (),
                     ordered=any(not t.trial_id.endswith(RERUN_SUFFIX) for t in start), read=read)

    def restop(self, recs: Sequence[TrialRecord], inputs: CellInputs, lost: frozenset, last: CellPlan) -> CellPlan:
        """:meth:`_restop`; a replicated cell's replicates are never stopped, only counted."""
        if not self.replicates:
            return self._restop(recs, inputs, lost, last)
        main, reps = split_replicates(self.spec, recs)
        out = self._restop(main, inputs, lost, last)
        counts: dict[str, int] = {}
        for r in recs:
            counts[r.status] = counts.get(r.status, 0) + 1
        return out if counts == out.cell.counts else replaced(out, cell=replaced(out.cell, counts=counts))

    def _restop(self, recs: Sequence[TrialRecord], inputs: CellInputs, lost: frozenset, last: CellPlan) -> CellPlan:
        """The plan of the cell when, since ``last`` (made under the same ``inputs``), only its trials
        that have not ended moved (their evaluations, or their status between queued, running and
        lost) and none of them has crossed the target, then or now: every part of the plan but the
        status counts and the stops reads such a trial's id alone (it has not ended), and its crossing
        (the cell's best, step cap and fit window), so only those are read again."""
        counts: dict[str, int] = {}
        for r in recs:
            counts[r.status] = counts.get(r.status, 0) + 1
        out = last if counts == last.cell.counts else replaced(last, cell=replaced(last.cell, counts=counts))
        stop: tuple[tuple[str, str], ...] = ()
        if last.released and self.role == "trial" and "running" in counts:
            target, chain, read = inputs.target, inputs.chain, last.read
            # Every crossing is an ended trial's, unchanged since `last`: its seeds' bests and the
            # rates next to them as they were.
            if "seed_best" not in read:
                read["seed_best"] = best_steps_by_seed(recs, target, self.crossing)
            seed_best = read["seed_best"]
            best = min(seed_best.values()) if seed_best else None
            stop = self._stops(recs, target, seed_best, best, last.rates, chain, self.cap(chain, best)[0], lost,
                               read, running=True)
        if stop == last.stopped_by:
            return out
        return replaced(out, stop=tuple((tid, "pruned") for tid, _ in stop), stopped_by=stop)

    def _stops(self, recs: Sequence[TrialRecord], target: float | None, seed_best: dict[int, float],
               best: float | None, rates: Sequence[float], chain: ChainState, cap: int | None,
               lost: frozenset, read: dict | None = None, *, running: bool | None = None) -> tuple[tuple[str, str], ...]:
        """``(trial id, rule)`` of each running trial of a released cell that a stop rule stops now, the
        rules judging in turn (:func:`cbscore.study.stop_rules.stop_rules`); ``read``: the plan's
        :attr:`CellPlan.read`, where its best rates' neighbours (``keep``) are kept; ``running``: whether
        a trial of ``recs`` is running, where the caller counted them."""
        if running is None:
            running = any(r.status == "running" for r in recs)
        if self.role != "trial" or not running:
            return ()
        cell = built(RunningCell, spec=self.spec, setting=self.setting, batch_size=self.batch_size, recs=recs,
                        target=target, seed_best=seed_best, best=best, rates=rates,
                        prev_best=chain.best_steps, cap=cap, lost=lost, crossing=self.crossing)  # (RunningCell(...))
        if read is not None and "keep" in read:
            cell.__dict__["keep"] = read["keep"]  # (the cached property, as read before)
        stop: list[tuple[str, str]] = []
        stopping: set[str] = set()
        for rule in self.stops:
            for tid in rule.stops(cell, stopping):
                stop.append((tid, rule.rule))
                stopping.add(tid)
        if read is not None and "keep" in cell.__dict__:
            read["keep"] = cell.__dict__["keep"]
        return tuple(stop)

    def _grid_trials(self, recs: Sequence[TrialRecord], present: set[str], rates: Sequence[float],
                     centre: float | None, seed_best: dict[int, float], target: float | None, cap: int | None,
                     cap_smaller: int | None, rerun: Sequence[TrialRecord], cell_target: float | None,
                     centre_of: Callable[[], float | None] | None = None) -> list[TrialSpec]:
        """The grid trials to start: each rate × seed not yet present, in the rule's order (the best
        rate's neighbours capped only by the smaller batch size), then the re-runs at
        :data:`RERUN_CAP_FACTOR` times their cap or budget."""
        spec, setting, b, role = self.spec, self.setting, self.batch_size, self.role
        start: list[TrialSpec] = []
        keep: set[tuple[int, float]] | None = None
        # (Ordered only where a trial is missing: most plans of a cell have all of them.)
        missing = not present.issuperset(self._rates_ids(rates))
        if missing and centre_of is not None:
            centre = centre_of()  # (read where it orders trials: :meth:`plan`)
        for lr in self.rates.order(rates, centre) if missing else ():
            for seed, tid in zip(spec.seeds, self._trial_ids(lr)):
                if tid not in present:
                    if keep is None:
                        keep = best_neighbours(recs, target, rates, self.crossing) if (role == "trial" and seed_best) else set()
                    own_cap = cap_smaller if (seed, lr) in keep else cap
                    start.append(make_trial(spec, setting, batch_size=b, role=role, lr=lr, seed=seed,
                                            tag=lr_tag(lr), max_steps=own_cap, target_loss=cell_target,
                                            with_config=self.configs, **self._config_parts()))
        for r in rerun:
            if r.trial_id + "." + RERUN_TAG not in present:
                larger = None if r.max_steps is None else int(math.ceil(RERUN_CAP_FACTOR * r.max_steps))
                t = make_trial(spec, setting, batch_size=b, role=role, lr=r.lr, seed=r.seed, tag=lr_tag(r.lr),
                               max_steps=larger, target_loss=target, budget_factor=RERUN_CAP_FACTOR,
                               with_config=self.configs, **self._config_parts())
                start.append(dataclasses.replace(t, trial_id=r.trial_id + "." + RERUN_TAG))
        return start

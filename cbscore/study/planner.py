"""The study planner: a pure function from (spec, trial records, now) to what happens next.

It never touches MLflow, Celery or Optuna, so it is easy to test and safe to re-run after any
failure (the runner in ``workers`` calls it at launch, after every trial and on a timer).

Order of work within a setting (DESIGN.md §1, "Target loss"):

1. The **reference cell** at ``B_ref`` runs every learning rate to D tokens. The best final
   held-out loss (averaged weights) among them is the setting's target (unless the spec gives
   targets explicitly).
2. The other cells run once the target is known, released in increasing batch size: a cell is
   released once the next smaller cell is *resolved* (a trial reached the target, or every trial
   ended), so its step cap can use what the smaller batch sizes already needed. With ``B_ref`` in
   the middle of the batch sizes this gives two chains that run side by side: upwards from
   ``B_ref``, and upwards from the smallest batch size. (A chained search releases its cells
   outward from ``B_ref`` instead, :mod:`cbscore.study.chained`.)

A :class:`Planner` plans one study call after call and reads only what changed since its last call:
records that are not the very objects it saw are read again, a cell is planned again only where
what it reads of its records (:func:`cbscore.study.cell_plan.record_key`) or its inputs changed,
and the targets, the predicted best rates and a chained search's centres only where the cells they
read changed. Its plans are those of a fresh planner (:func:`plan`, which keeps nothing), given the
same records; ``tests/cbscore/study/test_simulate.py`` checks every plan of simulated studies so.

Where the rules live: each cell's plan in :mod:`cbscore.study.cell_plan`, composed of its search
kind's rates (:mod:`cbscore.study.rate_rules`), the rules that stop running trials
(:mod:`cbscore.study.stop_rules`) and when a cell is done (:mod:`cbscore.study.cell_done`); the
budgets in :mod:`cbscore.study.budgets` (DESIGN.md §1, "Budgets that cannot bias B*"), the target
in :mod:`cbscore.study.targets`, what a plan holds in :mod:`cbscore.study.plan_result`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from cbscore.study.budgets import RERUN_CAP_FACTOR, RERUN_TAG, cell_budget_tokens, grid_tokens, grid_trials
from cbscore.study.cell_plan import CellInputs, CellPlan, CellPlanner, ChainState, record_key
from cbscore.study.cell_rates import cell_best_rate, cell_prediction, cell_rates
from cbscore.study.cell_trials import build_train_config
from cbscore.study.cell_trials import make_trial as _make_trial
from cbscore.study.chained import chain_centres
from cbscore.study.crossings import CrossingReader, Crossings
from cbscore.study.plan_result import AskRequest, CellState, Plan
from cbscore.study.spec import StudySpec
from cbscore.study.targets import setting_targets
from cbscore.study.trials import TERMINAL, TrialRecord, TrialSpec, built

# Read from here as well as from their own modules: the plan's types and a trial's config
# (cbscore.study.local_plan), the grid's size (cbscore.study.kinds) and what
# tests/app/store_seed.py builds a re-run with.
__all__ = ["RERUN_CAP_FACTOR", "RERUN_TAG", "AskRequest", "CellState", "Plan", "Planner", "_make_trial",
           "build_train_config", "cell_budget_tokens", "grid_tokens", "grid_trials", "plan"]


#: A cell's centre not read yet (:meth:`Planner._row_centres`).
_UNREAD = object()


def plan(spec: StudySpec, records: Sequence[TrialRecord], now_s: float, *,
         stale_after_s: float = 120.0, max_attempts: int = 3) -> Plan:
    """Decide what to run, stop, re-run or fail next. Pure: same inputs, same plan."""
    return Planner(spec).plan(records, now_s, stale_after_s=stale_after_s, max_attempts=max_attempts)


class _Cell:
    """One cell's planner, its records as at the planner's last call and what was read off them."""

    __slots__ = ("planner", "setting_id", "batch_size", "index", "recs", "keyed", "keys", "frames", "fresh", "key", "frame",
                 "evals_only", "crossed", "inputs", "out", "best", "pending")

    def __init__(self, planner: CellPlanner, index: int):
        self.planner = planner
        self.setting_id, self.batch_size = planner.setting.setting_id, planner.batch_size
        self.index = index
        """Its place in its setting's cells (increasing batch size)."""
        self.recs: list[TrialRecord] = []
        self.keyed: list[TrialRecord] = []
        self.keys: list[tuple] = []
        """``record_key`` of each of ``keyed``, the records as at the last call: only a record that is
        not the very object read then is read again (while the lost trials stay the same)."""
        self.frames: list[tuple] = []
        """:func:`_frame` of each of ``keyed``."""
        self.fresh: list[TrialRecord] = []
        """The records whose keys were read again at the last call."""
        self.key: tuple | None = None
        """What the cell plan reads of its records (``record_key`` of each), at the last call."""
        self.frame: tuple | None = None
        """``key`` without the evaluations and the status of trials that have not ended."""
        self.evals_only = False
        """Only trials that have not ended moved (evaluations, status) since the plan in ``out``."""
        self.crossed = True
        """Some running trial had crossed the target at the plan in ``out``."""
        self.inputs: CellInputs | None = None
        self.out: CellPlan | None = None
        """The cell's plan under ``inputs``, while ``key`` is unchanged."""
        self.best: tuple[float | None] | None = None
        """The cell's measured best rate (:func:`cbscore.study.cell_rates.cell_best_rate`), once read."""
        self.pending: tuple[float | None, bool] | None = None
        """A reference cell's guessed rate and whether it may still add a rate, once read."""


class Planner:
    """The planner of one study, called again and again as its records change (module docstring).
    One call at a time: it keeps what it read at the last call. ``configs=False``: the trials it
    starts carry no trainer config (``TrialSpec.train_config`` empty: the simulator, which trains
    none of them, checks each cell's once, :func:`cbscore.study.cell_trials.check_cell_configs`)."""

    def __init__(self, spec: StudySpec, *, configs: bool = True):
        self.spec = spec
        self.configs = configs
        self.settings = spec.resolve_settings()
        # The crossings its cells read (each record once per target): this study's, as its records.
        self._crossings = Crossings()
        self._cells: dict[str, _Cell] = {}
        self._by_setting: dict[str, list[_Cell]] = {}
        for s in self.settings:
            row = [_Cell(CellPlanner(spec, s, b, configs=configs, crossings=self._crossings), i)
                   for i, b in enumerate(spec.batch_sizes)]
            self._by_setting[s.setting_id] = row
            self._cells.update({c.planner.cell_id: c for c in row})
        # What the cells' rules read across cells.
        self._predicts = spec.search.runs_rates and (spec.experimental.predict or spec.experimental.prune_at_equal_tokens
                                                     or spec.search.order == "predicted")
        at_ref = list(spec.batch_sizes).index(spec.b_ref)  # (a spec's batch sizes hold B_ref)
        self._ref_ids = {s.setting_id: self._by_setting[s.setting_id][at_ref] for s in self.settings}
        # The last call's records, in order, and where each sits in its cell.
        self._records: list[TrialRecord] = []
        self._where: list[tuple[list[TrialRecord], int]] = []
        self._others: dict[str, list[TrialRecord]] = {}  # records of cells outside the grid of cells
        self._live: set[int] = set()  # indices of running and lost records: the stale-heartbeat triage reads them
        self._lost: frozenset = frozenset()
        self._targets: tuple[dict[str, float], list[str]] | None = None
        self._best_rates: dict[str, dict[int, float]] | None = None
        self._predicted: dict[str, dict[int, float | None]] = {}
        self._centres: dict[str, dict[int, float]] = {}
        self._centres_row: dict[str, tuple[tuple, list]] = {}
        # By ("predicted", setting id), ("centres", setting id): how often its predictions, its chained
        # centres moved.
        self._versions: dict[tuple[str, str], int] = {}
        self._setting_out: dict[str, tuple[tuple, tuple]] = {}

    # ------------------------------------------------------------------ records
    def _read(self, records: Sequence[TrialRecord], changed: Collection[int] | None = None) -> set[_Cell]:
        """Take this call's records; the cells whose records are not the very objects of the last call
        (``changed``: their positions, where the caller knows them)."""
        old = self._records
        if len(records) < len(old):
            return self._read_all(records)
        if changed is None:
            moved = [i for i, (r, o) in enumerate(zip(records, old)) if r is not o]
        else:
            moved = [i for i in changed if i < len(old) and records[i] is not old[i]]
        if any(records[i].trial_id != old[i].trial_id or records[i].cell_id != old[i].cell_id for i in moved):
            return self._read_all(records)  # another order: read every record again
        changed: set[_Cell] = set()
        for i in moved:
            r = records[i]
            recs, j = self._where[i]
            recs[j] = r
            old[i] = r
            self._mark(i, r, changed)
        for i in range(len(old), len(records)):
            r = records[i]
            recs = self._cell_records(r.cell_id, changed)
            self._where.append((recs, len(recs)))
            recs.append(r)
            old.append(r)
            self._mark(i, r, changed)
        return changed

    def _read_all(self, records: Sequence[TrialRecord]) -> set[_Cell]:
        for c in self._cells.values():
            c.recs, c.keyed, c.keys, c.frames = [], [], [], []
        self._others = {}
        self._records, self._where, self._live = [], [], set()
        changed = set(self._cells.values())
        self._read(records)
        return changed

    def _cell_records(self, cell_id: str, changed: set[_Cell]) -> list[TrialRecord]:
        cell = self._cells.get(cell_id)
        if cell is None:
            return self._others.setdefault(cell_id, [])
        changed.add(cell)
        return cell.recs

    def _mark(self, i: int, r: TrialRecord, changed: set[_Cell]) -> None:
        cell = self._cells.get(r.cell_id)
        if cell is not None:
            changed.add(cell)
        if r.status in ("running", "lost"):
            self._live.add(i)
        else:
            self._live.discard(i)

    # ------------------------------------------------------------------ a call
    def plan(self, records: Sequence[TrialRecord], now_s: float, *, stale_after_s: float = 120.0,
             max_attempts: int = 3, changed: Collection[int] | None = None) -> Plan:
        """Decide what to run, stop, re-run or fail next (as :func:`plan` does). ``changed``: the
        positions in ``records`` of those that are not the very objects of the last call, where the
        caller knows them (the simulator does); records past the last call's are read anyway. Without
        it every record is compared with the last call's."""
        spec = self.spec
        touched = self._read(records, changed)
        # Stale heartbeats: lost trials run again from their checkpoints, up to the attempt cap.
        lost, fail = [], []
        for i in sorted(self._live):
            r = self._records[i]
            if r.status == "running" and r.heartbeat_s is not None and now_s - r.heartbeat_s > stale_after_s:
                (lost if r.attempts_spent < max_attempts else fail).append(r.trial_id)
            elif r.status == "lost":
                (lost if r.attempts_spent < max_attempts else fail).append(r.trial_id)
        lost_set = frozenset(lost)
        if lost_set != self._lost:  # a record's key says whether it is lost
            self._lost = lost_set
            touched = set(self._cells.values())
            for c in touched:
                c.keyed, c.keys, c.frames = [], [], []
        changed = {c for c in touched if self._rekey(c, lost_set)}
        if self._targets is None or any(c in changed for c in self._ref_ids.values()):
            by_cell = {cid: c.recs for cid, c in self._cells.items() if c.recs}
            by_cell.update(self._others)
            self._targets = setting_targets(spec, self._records, by_cell=by_cell)
        targets, errors = dict(self._targets[0]), list(self._targets[1])
        if self._predicts and (self._best_rates is None or changed):
            self._read_best_rates(changed)
        if spec.search.kind == "chained":
            for sid in {c.setting_id for c in changed} | (set() if self._centres else set(self._by_setting)):
                centres = chain_centres(spec, {c.batch_size: c.recs for c in self._by_setting[sid]})
                if centres != self._centres.get(sid):
                    self._centres[sid] = centres
                    self._versions[("centres", sid)] = self._versions.get(("centres", sid), 0) + 1
        if spec.search.runs_rates and spec.target_losses is None:
            # A reference cell that may still add a learning rate has no target yet: the target comes
            # from the whole cell (DESIGN.md §1), so every cell is measured against the same one.
            # (cell_rates reads the guess only in a predicting grid: elsewhere it is not worked out, None
            # standing for it, and a reference cell's answer stands while its records do.)
            reads_guess = spec.search.kind == "grid" and spec.experimental.predict
            for sid, ref in self._ref_ids.items():
                guess = self._centre(sid, spec.b_ref) if reads_guess else None
                if ref.pending is None or ref.pending[0] != guess:
                    ref.pending = (guess, cell_rates(spec, ref.recs, "reference", guess)[1])
                if ref.pending[1]:
                    targets.pop(sid, None)
        cells: list[CellState] = []
        start: list[TrialSpec] = []
        asks: list[AskRequest] = []
        stop: list[tuple[str, str]] = []
        stopped_by: dict[str, str] = {}
        all_done = True
        lowest: dict[str, int] = {}  # by setting, its smallest cell that changed
        for c in changed:
            if c.index < lowest.get(c.setting_id, len(spec.batch_sizes)):
                lowest[c.setting_id] = c.index
        for setting in self.settings:
            sid = setting.setting_id
            target = targets.get(sid)
            failed = bool(errors) and any(e.startswith(f"setting {sid!r}") for e in errors)
            row = self._by_setting[sid]
            # A setting none of whose cells changed, under the same target and predictions, plans as
            # at the last call (the simulator's calls change one or two cells of one setting).
            inputs = (target, failed, self._versions.get(("predicted", sid), 0), self._versions.get(("centres", sid), 0))
            last = self._setting_out.get(sid)
            if last is None or last[0] != inputs:
                last = self._setting_out[sid] = (inputs, self._plan_setting(row, target, failed, lost_set))
            else:
                # The cells below the smallest that changed plan as at the last call.
                if sid in lowest:
                    last = self._setting_out[sid] = (inputs, self._plan_setting(row, target, failed, lost_set, lowest[sid],
                                                                                same_inputs=True))
            s_cells, s_start, s_asks, s_stop, s_incomplete, s_stopped_by = last[1]
            cells.extend(s_cells)
            start.extend(s_start)
            asks.extend(s_asks)
            stop.extend(s_stop)
            stopped_by.update(s_stopped_by)
            if s_incomplete:
                all_done = False
        return built(Plan, start=tuple(start), ask=tuple(asks), stop=tuple(stop), stopped_by=stopped_by,
                     lost=tuple(lost), fail=tuple(fail), targets=targets, cells=tuple(cells), errors=tuple(errors),
                     done=all_done and not lost)  # (Plan(...), every field)

    def _rekey(self, cell: _Cell, lost: frozenset) -> bool:
        """Read the cell's record keys again; whether they changed (its plan goes then, unless only its
        trials that have not ended moved: their counts and stop rules are read again, :meth:`CellPlanner.restop`)."""
        recs, keyed, keys, frames = cell.recs, cell.keyed, cell.keys, cell.frames
        fresh = cell.fresh = []
        for j in range(len(keyed)):
            if recs[j] is not keyed[j]:
                keyed[j], keys[j] = recs[j], record_key(recs[j], lost)
                frames[j] = _frame(recs[j], keys[j])
                fresh.append(recs[j])
        for j in range(len(keyed), len(recs)):
            keyed.append(recs[j])
            keys.append(record_key(recs[j], lost))
            frames.append(_frame(recs[j], keys[j]))
            fresh.append(recs[j])
        key = tuple(keys)
        if key == cell.key:
            return False
        frame = tuple(frames)
        cell.evals_only = cell.out is not None and frame == cell.frame
        if not cell.evals_only:
            cell.out = None
        cell.key, cell.frame, cell.pending = key, frame, None
        return True

    def _read_best_rates(self, changed: set[_Cell]) -> None:
        """Each setting's measured best rates (:func:`cbscore.study.cell_rates.cell_best_rate`), where a
        rule predicts from them; a setting's predictions are made again where one of its cells' moved,
        every setting's where a reference cell's did (a setting with no other measured cell predicts
        its reference cell from the others')."""
        spec = self.spec
        first = self._best_rates is None
        moved: set[str] = set(self._by_setting) if first else set()
        for c in self._cells.values() if first else changed:
            if c.evals_only and c.best is not None:
                continue  # (only trials that have not ended moved: its best reads ended first attempts alone)
            best = (cell_best_rate(spec, c.batch_size, c.recs) if c.recs else None,)
            if best != c.best:
                moved.add(c.setting_id)
                if c.batch_size == spec.b_ref:
                    moved.update(self._by_setting)
            c.best = best
        if not moved:
            return
        self._best_rates = {sid: {c.batch_size: c.best[0] for c in row if c.best is not None and c.best[0] is not None}
                            for sid, row in self._by_setting.items()}
        for sid in moved:
            self._predicted[sid] = {}
            self._versions[("predicted", sid)] = self._versions.get(("predicted", sid), 0) + 1

    def _centre(self, setting_id: str, batch_size: int) -> float | None:
        """The cell's guessed best rate (:mod:`cbscore.study.rate_rules`): a chained cell's centre (at a
        chained search's reference cell, the prediction the grid's order reads), else the prediction
        from the setting's other cells where a rule asks for one, else ``None``."""
        spec = self.spec
        if spec.search.kind == "chained" and not (batch_size == spec.b_ref and spec.target_losses is None):
            return self._centres[setting_id].get(batch_size)
        if not self._predicts:
            return None
        known = self._predicted[setting_id]
        if batch_size not in known:
            known[batch_size] = cell_prediction(spec, setting_id, self._best_rates, batch_size)
        return known[batch_size]

    def _row_centres(self, setting_id: str) -> list:
        """:meth:`_centre` of each of the setting's cells, :data:`_UNREAD` until a plan reads it (a cell
        whose plan does not read its centre is not predicted), made again where its predictions or its
        chained centres moved."""
        key = (self._versions.get(("predicted", setting_id), 0), self._versions.get(("centres", setting_id), 0))
        last = self._centres_row.get(setting_id)
        if last is None or last[0] != key:
            last = self._centres_row[setting_id] = (key, [_UNREAD] * len(self._by_setting[setting_id]))
        return last[1]

    def _plan_setting(self, row: list[_Cell], target: float | None, failed: bool, lost: frozenset,
                      first: int = 0, *, same_inputs: bool = False) -> tuple:
        """One setting's cells in increasing batch size, each handing its chain state to the next:
        ``(cells, trials to start, asks, stops, whether any cell is incomplete, the rule of each stop)``;
        the cells below ``first`` as planned at the last call (their records and inputs unchanged);
        ``same_inputs``: the setting's target and predictions are those of its last pass."""
        cells: list[CellState] = []
        start: list[TrialSpec] = []
        asks: list[AskRequest] = []
        stop: list[tuple[str, str]] = []
        stopped_by: dict[str, str] = {}
        incomplete = False
        chain = ChainState()
        centres = self._row_centres(row[0].setting_id)
        for i, c in enumerate(row):
            # Under the setting's same inputs, a cell whose records did not move, handed the very chain
            # state of its plan and whose plan reads no centre plans as it did (what _update_cell would
            # find): most cells above the smallest that changed.
            if i >= first and (not same_inputs or c.out is None or c.evals_only or c.inputs.chain is not chain
                               or (c.out.ordered or not c.planner.orders_only)):
                ins = c.inputs
                # (What _update_cell reads first: a cell whose plan stands, unmoved, under inputs equal to its
                # own and reading no centre, is left as it is, most of the cells of a setting planned again.)
                if (c.out is None or c.evals_only or (ins.chain is not chain and ins.chain != chain)
                        or (ins.target is not target and ins.target != target) or ins.setting_failed != failed
                        or c.out.ordered or not c.planner.orders_only):
                    self._update_cell(c, centres, i, target, chain, failed, lost)
            out = c.out
            cells.append(out.cell)
            chain = out.chain
            if out.skipped:
                continue  # resolved for the chain; the bound carries over unchanged
            if out.start:
                start.extend(out.start)
            if out.ask:
                asks.extend(out.ask)
            if out.stop:  # (its stopped_by names the same trials)
                stop.extend(out.stop)
                stopped_by.update(out.stopped_by)
            incomplete = incomplete or out.incomplete
        return tuple(cells), tuple(start), tuple(asks), tuple(stop), incomplete, stopped_by

    def _update_cell(self, c: _Cell, centres: list, i: int, target: float | None, chain: ChainState, failed: bool,
                     lost: frozenset) -> None:
        """Bring the plan of cell ``c`` (the ``i``-th of its setting) up to date with its records and
        inputs: planned again where they changed, only its status counts and stops read again where
        only its trials that have not ended moved and none crossed (:meth:`CellPlanner.restop`)."""
        ins = c.inputs
        # (Each compared as in a tuple, the very object first: most calls hand on the same chain.)
        if (c.out is None or (ins.chain is not chain and ins.chain != chain)
                or (ins.target is not target and ins.target != target) or ins.setting_failed != failed
                or (c.out.ordered or not c.planner.orders_only)):
            if c.out is not None and c.out.ordered or not c.planner.orders_only:
                inputs = CellInputs(target, chain, failed, self._read_centre(centres, i, c))
            else:
                # (Its plan moved or its inputs did, whatever the centre, and its rule reads the centre
                # only to order first attempts it starts: read there alone, :meth:`_plan_cell`.)
                inputs = CellInputs(target, chain, failed)
            if c.out is None or c.inputs != inputs:
                self._plan_cell(c, centres, i, inputs, lost)
                c.crossed = _running_crossed(c.recs, target, c.planner.crossing)
                c.evals_only = False
                return
        # (Else nothing of the plan reads the centre, whatever it is now: the plan stands, and its
        # inputs keep the centre it was made under; the centre is read where the cell plans afresh.)
        if c.evals_only:
            # (None had crossed at the last call: only the records read again this call may have; one
            # unchanged since, or changed with its key unchanged, crosses where it did.)
            crossed = _running_crossed(c.fresh if not c.crossed else c.recs, target, c.planner.crossing)
            if crossed or c.crossed:
                self._plan_cell(c, centres, i, CellInputs(target, chain, failed, self._read_centre(centres, i, c)
                                                          if not c.planner.orders_only else None), lost)
            else:
                c.out = c.planner.restop(c.recs, c.inputs, lost, c.out)  # (it reads the target and the chain)
            c.crossed = crossed
        c.evals_only = False

    def _plan_cell(self, c: _Cell, centres: list, i: int, inputs: CellInputs, lost: frozenset) -> None:
        """Plan cell ``c`` (the ``i``-th of its setting) afresh under ``inputs``. Under a rule that reads
        the centre only to order the first attempts it starts (``orders_only``), ``inputs`` may leave
        the centre out (``None``): it is read only where the plan starts some (``ordered``), and kept in
        the cell's inputs then, as it would have been given (a plan that starts none reads nothing of
        it: the same plan whatever the centre)."""
        lazy = c.planner.orders_only and inputs.centre is None
        c.out = c.planner.plan(c.recs, inputs, lost,
                               centre_of=(lambda: self._read_centre(centres, i, c)) if lazy else None)
        c.inputs = inputs._replace(centre=self._read_centre(centres, i, c)) if lazy and c.out.ordered else inputs

    def _read_centre(self, centres: list, i: int, c: _Cell) -> float | None:
        """The centre of cell ``c``, the ``i``-th of its setting's ``centres`` (:meth:`_row_centres`)."""
        if centres[i] is _UNREAD:
            centres[i] = self._centre(c.setting_id, c.batch_size)
        return centres[i]


def _frame(r: TrialRecord, key: tuple) -> tuple:
    """A record's ``record_key`` without what a trial that has not ended may change without a re-plan:
    its evaluations, and its status between queued, running and lost (:meth:`CellPlanner.restop`)."""
    return key if r.status in TERMINAL else (key[0],) + key[2:8] + key[11:]  # (r.terminal)


def _running_crossed(recs: Sequence[TrialRecord], target: float | None, crossing: CrossingReader) -> bool:
    """Whether a trial of ``recs`` that has not ended has crossed ``target`` at an evaluation."""
    return target is not None and any(crossing(r, target) is not None for r in recs if r.status not in TERMINAL)

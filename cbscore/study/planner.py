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
   ``B_ref``, and upwards from the smallest batch size.

Where the rules live: the budgets in :mod:`cbscore.study.budgets` (DESIGN.md §1, "Budgets that
cannot bias B*"), the target in :mod:`cbscore.study.targets`, each cell's learning rates in
:mod:`cbscore.study.cell_rates`, its step cap, re-runs, pruning and skipping in
:mod:`cbscore.study.cell_plan`, and what a plan holds in :mod:`cbscore.study.plan_result`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Sequence

from cbscore.study.budgets import RERUN_CAP_FACTOR, RERUN_TAG, cell_budget_tokens, grid_tokens, grid_trials
from cbscore.study.cell_plan import CellPlan, plan_cell, record_key
from cbscore.study.cell_rates import cell_best_rate, cell_prediction, cell_rates
from cbscore.study.cell_trials import build_train_config, cell_id, make_trial as _make_trial, records_by_cell
from cbscore.study.plan_result import AskRequest, CellState, Plan
from cbscore.study.spec import StudySpec
from cbscore.study.targets import setting_targets
from cbscore.study.trials import TrialRecord, TrialSpec

# Read from here as well as from their own modules: the plan's types and a trial's config
# (cbscore.study.local_plan), the grid's size (cbscore.study.plan_kinds) and what
# tests/app/store_seed.py builds a re-run with.
__all__ = ["RERUN_CAP_FACTOR", "RERUN_TAG", "AskRequest", "CellState", "Plan", "_make_trial", "build_train_config",
           "cell_budget_tokens", "grid_tokens", "grid_trials", "plan"]


#: Cell plans of one spec by the cell's inputs: a cell whose records, target and chain state did not
#: change since the last call plans the same (the simulator calls ``plan`` at every event with one
#: spec). Kept for the last spec seen only, so a runner that rebuilds its specs holds no more.
_CELL_PLANS: dict[tuple, CellPlan] = {}
_CELL_PLANS_SPEC: list[StudySpec | None] = [None]
#: Each cell's measured best rate by the cell's record keys, and each cell's predicted rate by the
#: setting's measured best rates (cleared with _CELL_PLANS): they change only when a cell ends.
_CELL_BEST: dict[tuple, float | None] = {}
_CELL_PREDICTED: dict[tuple, dict[tuple[str, int], float | None]] = {}
#: Each cell's records at the last call, by cell id, with what was worked out from them: a caller
#: that passes the same (frozen) record objects again, as the simulator does for every ended trial,
#: skips building and hashing their keys.
_LAST_CELLS: dict[str, "_CellSeen"] = {}
#: The targets at the last call and the reference cells they were read from (cells, targets, errors).
_LAST_TARGETS: dict[str, object] = {}
#: Each setting's plan at the last call: (its inputs, its cells' records as seen, what it planned).
_LAST_SETTINGS: dict[str, tuple] = {}
#: Cell ids of the last spec planned, by (setting id, batch size).
_CELL_IDS: dict[tuple[str, int], str] = {}


def _cell_ids(spec: StudySpec) -> dict[tuple[str, int], str]:
    """Every cell id of ``spec`` by (setting id, batch size), built once per spec (cleared with _CELL_PLANS)."""
    if not _CELL_IDS:
        _CELL_IDS.update({(s.setting_id, b): cell_id(s.setting_id, b)
                          for s in spec.resolve_settings() for b in (*spec.batch_sizes, spec.b_ref)})
    return _CELL_IDS


@dataclass
class _CellSeen:
    """One cell's records at a call (the objects themselves) and what the planner read off them."""

    recs: tuple[TrialRecord, ...]
    lost: frozenset
    key: tuple
    inputs: tuple | None = None
    """The cell plan's other inputs at the last call, and its plan then."""
    out: CellPlan | None = None
    best: tuple[float | None] | None = None
    """The cell's measured best rate (:func:`cbscore.study.cell_rates.cell_best_rate`), once read."""
    pending: tuple[float | None, bool] | None = None
    """A reference cell's prediction and whether it may still add a rate, at the last call."""

    def same(self, recs: Sequence[TrialRecord], lost: frozenset) -> bool:
        return (len(recs) == len(self.recs) and lost == self.lost
                and all(a is b for a, b in zip(recs, self.recs)))


def plan(spec: StudySpec, records: Sequence[TrialRecord], now_s: float, *,
         stale_after_s: float = 120.0, max_attempts: int = 3) -> Plan:
    """Decide what to run, stop, re-run or fail next. Pure: same inputs, same plan."""
    # The memos above are shared by the process (the web app plans from several page threads):
    # one call at a time reads and fills them.
    with _MEMO_LOCK:
        return _plan(spec, records, now_s, stale_after_s=stale_after_s, max_attempts=max_attempts)


_MEMO_LOCK = threading.Lock()


def _plan(spec: StudySpec, records: Sequence[TrialRecord], now_s: float, *,
          stale_after_s: float, max_attempts: int) -> Plan:
    by_cell = records_by_cell(records)
    if _CELL_PLANS_SPEC[0] is not spec:
        _CELL_PLANS.clear()
        _CELL_BEST.clear()
        _CELL_PREDICTED.clear()
        _LAST_CELLS.clear()
        _LAST_TARGETS.clear()
        _CELL_IDS.clear()
        _LAST_SETTINGS.clear()
        _CELL_PLANS_SPEC[0] = spec
    start: list[TrialSpec] = []
    asks: list[AskRequest] = []
    stop: list[tuple[str, str]] = []
    cells: list[CellState] = []
    errors: list[str] = []
    all_done = True
    grid = spec.search.kind == "grid"

    # Stale heartbeats: lost trials run again from their checkpoints, up to the attempt cap.
    lost, fail = [], []
    for r in records:
        if r.status == "running" and r.heartbeat_s is not None and now_s - r.heartbeat_s > stale_after_s:
            (lost if r.attempt < max_attempts else fail).append(r.trial_id)
        elif r.status == "lost":
            (lost if r.attempt < max_attempts else fail).append(r.trial_id)

    lost_set = frozenset(lost)
    # Every cell's records as the cell plans' memo reads them, once per call.
    seen: dict[str, _CellSeen] = {}
    for cid, recs in by_cell.items():
        last = _LAST_CELLS.get(cid)
        if last is None or not last.same(recs, lost_set):
            last = _LAST_CELLS[cid] = _CellSeen(tuple(recs), lost_set, tuple(record_key(r, lost_set) for r in recs))
        seen[cid] = last
    if len(_LAST_CELLS) > 4 * len(seen) + 1_000:  # cells of specs no longer planned
        for cid in [c for c in _LAST_CELLS if c not in seen]:
            del _LAST_CELLS[cid]
    cell_keys = {cid: c.key for cid, c in seen.items()}
    # The targets read only the reference cells: unchanged cells (the same records) give the same ones.
    ref_cells = tuple(seen.get(_cell_ids(spec)[(s.setting_id, spec.b_ref)]) for s in spec.resolve_settings())
    last_ref = _LAST_TARGETS.get("cells")
    if last_ref is not None and len(last_ref) == len(ref_cells) and all(a is b for a, b in zip(last_ref, ref_cells)):
        targets, target_errors = dict(_LAST_TARGETS["targets"]), list(_LAST_TARGETS["errors"])
    else:
        targets, target_errors = setting_targets(spec, records, by_cell=by_cell)
        _LAST_TARGETS.update(cells=ref_cells, targets=dict(targets), errors=list(target_errors))
    errors.extend(target_errors)
    # Each setting's measured best rates, once per call, where a rule predicts from them (the
    # order cells start their rates in, search.order, is one).
    best_rates = (_best_rates(spec, by_cell, seen)
                  if grid and (spec.search.predict or spec.prune_at_equal_tokens or spec.search.order == "predicted")
                  else None)
    # The predictions read only the measured best rates: one frozen copy keys them.
    measured_key = tuple((sid, tuple(v.items())) for sid, v in best_rates.items()) if best_rates else ()

    if best_rates and measured_key not in _CELL_PREDICTED and len(_CELL_PREDICTED) >= 2_000:
        _CELL_PREDICTED.clear()
    predictions = _CELL_PREDICTED.setdefault(measured_key, {}) if best_rates else {}

    def predicted_rate(setting_id: str, b: int) -> float | None:
        if not best_rates:
            return None
        if (setting_id, b) not in predictions:
            predictions[(setting_id, b)] = cell_prediction(spec, setting_id, best_rates, b)
        return predictions[(setting_id, b)]

    if grid and spec.target_losses is None:
        # A reference cell that may still add a learning rate has no target yet: the target comes
        # from the whole cell (DESIGN.md §1), so every cell is measured against the same one.
        for setting in spec.resolve_settings():
            ref_id = _cell_ids(spec)[(setting.setting_id, spec.b_ref)]
            guess = predicted_rate(setting.setting_id, spec.b_ref)
            ref = seen.get(ref_id)
            if ref is None:
                pending = cell_rates(spec, [], "reference", guess)[1]
            else:
                if ref.pending is None or ref.pending[0] != guess:
                    ref.pending = (guess, cell_rates(spec, ref.recs, "reference", guess)[1])
                pending = ref.pending[1]
            if pending:
                targets.pop(setting.setting_id, None)
    for setting in spec.resolve_settings():
        target = targets.get(setting.setting_id)
        setting_failed = any(e.startswith(f"setting {setting.setting_id!r}") for e in errors)
        ids = [_cell_ids(spec)[(setting.setting_id, b)] for b in spec.batch_sizes]
        # A setting none of whose cells changed, under the same target and predictions, plans as
        # at the last call (the simulator's wakes change one or two cells of one setting).
        inputs = (target, setting_failed, tuple(predicted_rate(setting.setting_id, b) for b in spec.batch_sizes))
        now_seen = tuple(seen.get(cid) for cid in ids)
        last = _LAST_SETTINGS.get(setting.setting_id)
        if (last is not None and last[0] == inputs and len(last[1]) == len(now_seen)
                and all(a is b for a, b in zip(last[1], now_seen)) and not lost_set):
            planned = last[2]
        else:
            planned = _plan_setting(spec, setting, by_cell, seen, cell_keys, target, setting_failed, lost_set,
                                    predicted_rate)
            _LAST_SETTINGS[setting.setting_id] = (inputs, now_seen, planned)
        cells.extend(planned[0])
        start.extend(planned[1])
        asks.extend(planned[2])
        stop.extend(planned[3])
        if planned[4]:
            all_done = False

    return Plan(start=tuple(start), ask=tuple(asks), stop=tuple(stop), lost=tuple(lost), fail=tuple(fail),
                targets=targets, cells=tuple(cells), errors=tuple(errors),
                done=all_done and not lost)


def _best_rates(spec: StudySpec, by_cell: dict[str, list[TrialRecord]],
                seen: dict[str, _CellSeen]) -> dict[str, dict[int, float]]:
    """``{setting id: {batch size: best rate}}`` of the cells measured so far
    (:func:`cbscore.study.cell_rates.cell_best_rate`), each memoised by the cell's records (a cell's
    best changes only when its trials end)."""
    out: dict[str, dict[int, float]] = {}
    for setting in spec.resolve_settings():
        rates: dict[int, float] = {}
        for b in spec.batch_sizes:
            cell = seen.get(_cell_ids(spec)[(setting.setting_id, b)])
            if cell is None:
                continue
            if cell.best is None:
                if cell.key not in _CELL_BEST:
                    if len(_CELL_BEST) >= 20_000:
                        _CELL_BEST.clear()
                    _CELL_BEST[cell.key] = cell_best_rate(spec, b, cell.recs)
                cell.best = (_CELL_BEST[cell.key],)
            if cell.best[0] is not None:
                rates[b] = cell.best[0]
        out[setting.setting_id] = rates
    return out


def _plan_setting(spec: StudySpec, setting, by_cell: dict[str, list[TrialRecord]], seen: dict[str, _CellSeen],
                  cell_keys: dict[str, tuple], target: float | None, setting_failed: bool, lost_set: frozenset,
                  predicted_rate) -> tuple[list[CellState], list[TrialSpec], list[AskRequest], list[tuple[str, str]],
                                           bool]:
    """One setting's cells in increasing batch size, each handing its chain state to the next:
    ``(cells, trials to start, asks, stops, whether any cell is incomplete)``."""
    cells: list[CellState] = []
    start: list[TrialSpec] = []
    asks: list[AskRequest] = []
    stop: list[tuple[str, str]] = []
    incomplete = False
    prev_resolved = True
    # Fewest steps to target of the nearest smaller batch size that has one (its own
    # measurement: a running minimum over many noisy cells is biased low, issue 19).
    prev_best: float | None = None
    # A lower bound on tokens to target from the smaller batch sizes: E(B) > at_least.
    at_least = 0.0
    for b in spec.batch_sizes:
        cid = _cell_ids(spec)[(setting.setting_id, b)]
        recs = by_cell.get(cid, [])
        predicted = predicted_rate(setting.setting_id, b)
        inputs = (target, prev_resolved, prev_best, at_least, setting_failed, predicted)
        cell = seen.get(cid)
        if cell is not None and cell.inputs == inputs:
            out = cell.out
        else:
            key = (setting.setting_id, b, *inputs, cell_keys.get(cid, ()))
            out = _CELL_PLANS.get(key)
            if out is None:
                out = plan_cell(spec, setting, b, recs, target, prev_resolved, prev_best, at_least,
                                setting_failed, lost_set, predicted)
                if len(_CELL_PLANS) >= 20_000:
                    _CELL_PLANS.clear()
                _CELL_PLANS[key] = out
            if cell is not None:
                cell.inputs, cell.out = inputs, out
        cells.append(out.cell)
        if out.skipped:
            continue  # resolved for the chain; the bound carries over unchanged
        start.extend(out.start)
        asks.extend(out.ask)
        stop.extend(out.stop)
        incomplete = incomplete or out.incomplete
        prev_resolved, prev_best, at_least = out.prev_resolved, out.prev_best, out.at_least
    return cells, start, asks, stop, incomplete

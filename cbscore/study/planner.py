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
:mod:`cbscore.study.cell_plan`, what a plan holds in :mod:`cbscore.study.plan_result`, and what
the planner keeps between calls (read off unchanged records only) in :mod:`cbscore.study.plan_memo`.
"""

from __future__ import annotations

from typing import Callable, Sequence

from cbscore.study.budgets import RERUN_CAP_FACTOR, RERUN_TAG, cell_budget_tokens, grid_tokens, grid_trials
from cbscore.study.cell_plan import plan_cell
from cbscore.study.cell_rates import cell_rates
from cbscore.study.chained import chain_centres
from cbscore.study.cell_trials import build_train_config, make_trial as _make_trial, records_by_cell
from cbscore.study.plan_memo import CellSeen, PlanMemo
from cbscore.study.plan_result import AskRequest, CellState, Plan
from cbscore.study.spec import Setting, StudySpec
from cbscore.study.trials import TrialRecord, TrialSpec

# Read from here as well as from their own modules: the plan's types and a trial's config
# (cbscore.study.local_plan), the grid's size (cbscore.study.plan_kinds) and what
# tests/app/store_seed.py builds a re-run with.
__all__ = ["RERUN_CAP_FACTOR", "RERUN_TAG", "AskRequest", "CellState", "Plan", "_make_trial", "build_train_config",
           "cell_budget_tokens", "grid_tokens", "grid_trials", "plan"]


#: What the planner keeps between calls (cbscore.study.plan_memo): every plan is the same without it.
_MEMO = PlanMemo()


def plan(spec: StudySpec, records: Sequence[TrialRecord], now_s: float, *,
         stale_after_s: float = 120.0, max_attempts: int = 3) -> Plan:
    """Decide what to run, stop, re-run or fail next. Pure: same inputs, same plan."""
    with _MEMO.lock:
        _MEMO.use(spec)
        return _plan(spec, records, now_s, stale_after_s=stale_after_s, max_attempts=max_attempts)


def _plan(spec: StudySpec, records: Sequence[TrialRecord], now_s: float, *,
          stale_after_s: float, max_attempts: int) -> Plan:
    by_cell = records_by_cell(records)
    start: list[TrialSpec] = []
    asks: list[AskRequest] = []
    stop: list[tuple[str, str]] = []
    stopped_by: dict[str, str] = {}
    cells: list[CellState] = []
    errors: list[str] = []
    all_done = True
    grid = spec.search.runs_rates

    # Stale heartbeats: lost trials run again from their checkpoints, up to the attempt cap.
    lost, fail = [], []
    for r in records:
        if r.status == "running" and r.heartbeat_s is not None and now_s - r.heartbeat_s > stale_after_s:
            (lost if r.attempt < max_attempts else fail).append(r.trial_id)
        elif r.status == "lost":
            (lost if r.attempt < max_attempts else fail).append(r.trial_id)

    lost_set = frozenset(lost)
    # Every cell's records and what was read off them, the last call's where they are the same.
    seen = _MEMO.seen_cells(by_cell, lost_set)
    targets, target_errors = _MEMO.setting_targets(spec, records, by_cell, seen)
    errors.extend(target_errors)
    # Each setting's measured best rates, once per call, where a rule predicts from them (the
    # order cells start their rates in, search.order, is one).
    best_rates = (_MEMO.best_rates(spec, seen)
                  if grid and (spec.experimental.predict or spec.experimental.prune_at_equal_tokens or spec.search.order == "predicted")
                  else None)
    predicted_rate = _MEMO.predictor(spec, best_rates)
    if spec.search.kind == "chained":
        # Each cell's centre from its settled neighbour towards B_ref (cbscore.study.chained); the
        # reference cell keeps the grid's order.
        predicted_rate = _chain_predictor(spec, by_cell, predicted_rate)

    if grid and spec.target_losses is None:
        # A reference cell that may still add a learning rate has no target yet: the target comes
        # from the whole cell (DESIGN.md §1), so every cell is measured against the same one.
        for setting in spec.resolve_settings():
            guess = predicted_rate(setting.setting_id, spec.b_ref)
            ref = seen.get(_MEMO.cell_id(setting.setting_id, spec.b_ref))
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
        # A setting none of whose cells changed, under the same target and predictions, plans as
        # at the last call (the simulator's wakes change one or two cells of one setting).
        inputs = (target, setting_failed, lost_set,
                  tuple(predicted_rate(setting.setting_id, b) for b in spec.batch_sizes))
        now_seen = tuple(seen.get(_MEMO.cell_id(setting.setting_id, b)) for b in spec.batch_sizes)
        planned = _MEMO.setting_plan(setting.setting_id, inputs, now_seen,
                                     lambda: _plan_setting(spec, setting, by_cell, seen, target, setting_failed,
                                                           lost_set, predicted_rate))
        cells.extend(planned[0])
        start.extend(planned[1])
        asks.extend(planned[2])
        stop.extend(planned[3])
        stopped_by.update(planned[5])
        if planned[4]:
            all_done = False

    return Plan(start=tuple(start), ask=tuple(asks), stop=tuple(stop), stopped_by=stopped_by,
                lost=tuple(lost), fail=tuple(fail),
                targets=targets, cells=tuple(cells), errors=tuple(errors),
                done=all_done and not lost)


def _chain_predictor(spec: StudySpec, by_cell: dict[str, list[TrialRecord]],
                     reference: Callable[[str, int], float | None]) -> Callable[[str, int], float | None]:
    """``predicted(setting id, batch size)`` of a chained search: each cell's centre
    (:func:`cbscore.study.chained.chain_centres`; ``None`` until its neighbour settled), and at the
    reference cell ``reference``'s prediction (the order its grid starts in)."""
    centres = {s.setting_id: chain_centres(spec, {b: by_cell.get(_MEMO.cell_id(s.setting_id, b), ())
                                                  for b in spec.batch_sizes})
               for s in spec.resolve_settings()}
    ref_role = spec.target_losses is None

    def predicted(setting_id: str, batch_size: int) -> float | None:
        if batch_size == spec.b_ref and ref_role:
            return reference(setting_id, batch_size)
        return centres[setting_id].get(batch_size)

    return predicted


def _plan_setting(spec: StudySpec, setting: Setting, by_cell: dict[str, list[TrialRecord]],
                  seen: dict[str, CellSeen], target: float | None, setting_failed: bool, lost_set: frozenset,
                  predicted_rate: Callable[[str, int], float | None]
                  ) -> tuple[list[CellState], list[TrialSpec], list[AskRequest], list[tuple[str, str]], bool,
                             dict[str, str]]:
    """One setting's cells in increasing batch size, each handing its chain state to the next:
    ``(cells, trials to start, asks, stops, whether any cell is incomplete, the rule of each stop)``."""
    cells: list[CellState] = []
    start: list[TrialSpec] = []
    asks: list[AskRequest] = []
    stop: list[tuple[str, str]] = []
    stopped_by: dict[str, str] = {}
    incomplete = False
    prev_resolved = True
    # Fewest steps to target of the nearest smaller batch size that has one (its own
    # measurement: a running minimum over many noisy cells is biased low, issue 19).
    prev_best: float | None = None
    # A lower bound on tokens to target from the smaller batch sizes: E(B) > at_least.
    at_least = 0.0
    for b in spec.batch_sizes:
        cid = _MEMO.cell_id(setting.setting_id, b)
        recs = by_cell.get(cid, [])
        predicted = predicted_rate(setting.setting_id, b)
        inputs = (target, prev_resolved, prev_best, at_least, setting_failed, predicted)
        cell = seen.get(cid)
        if cell is not None and cell.inputs == inputs:
            out = cell.out
        else:
            out = _MEMO.cell_plan((setting.setting_id, b, *inputs, cell.key if cell is not None else ()),
                                  lambda: plan_cell(spec, setting, b, recs, target, prev_resolved, prev_best,
                                                    at_least, setting_failed, lost_set, predicted))
            if cell is not None:
                cell.inputs, cell.out = inputs, out
        cells.append(out.cell)
        if out.skipped:
            continue  # resolved for the chain; the bound carries over unchanged
        start.extend(out.start)
        asks.extend(out.ask)
        stop.extend(out.stop)
        stopped_by.update(out.stopped_by)
        incomplete = incomplete or out.incomplete
        prev_resolved, prev_best, at_least = out.prev_resolved, out.prev_best, out.at_least
    return cells, start, asks, stop, incomplete, stopped_by

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

from typing import Sequence

from cbscore.study.budgets import RERUN_CAP_FACTOR, RERUN_TAG, cell_budget_tokens, grid_tokens, grid_trials
from cbscore.study.cell_plan import CellPlan, plan_cell, record_key
from cbscore.study.cell_rates import cell_prediction, cell_rates, setting_best_rates
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


def plan(spec: StudySpec, records: Sequence[TrialRecord], now_s: float, *,
         stale_after_s: float = 120.0, max_attempts: int = 3) -> Plan:
    """Decide what to run, stop, re-run or fail next. Pure: same inputs, same plan."""
    by_cell = records_by_cell(records)
    if _CELL_PLANS_SPEC[0] is not spec:
        _CELL_PLANS.clear()
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
    targets, target_errors = setting_targets(spec, records, by_cell=by_cell)
    errors.extend(target_errors)
    # Each setting's measured best rates, once per call, where a rule predicts from them (the
    # order cells start their rates in, search.order, is one).
    best_rates = ({s.setting_id: setting_best_rates(spec, s, by_cell) for s in spec.resolve_settings()}
                  if grid and (spec.search.predict or spec.prune_at_equal_tokens or spec.search.order == "predicted")
                  else None)
    if grid and spec.target_losses is None:
        # A reference cell that may still add a learning rate has no target yet: the target comes
        # from the whole cell (DESIGN.md §1), so every cell is measured against the same one.
        for setting in spec.resolve_settings():
            ref = by_cell.get(cell_id(setting.setting_id, spec.b_ref), [])
            guess = cell_prediction(spec, setting.setting_id, best_rates, spec.b_ref) if best_rates else None
            if cell_rates(spec, ref, "reference", guess)[1]:
                targets.pop(setting.setting_id, None)
    for setting in spec.resolve_settings():
        target = targets.get(setting.setting_id)

        prev_resolved = True
        # Fewest steps to target of the nearest smaller batch size that has one (its own
        # measurement: a running minimum over many noisy cells is biased low, issue 19).
        prev_best: float | None = None
        # A lower bound on tokens to target from the smaller batch sizes: E(B) > at_least.
        at_least = 0.0
        setting_failed = any(e.startswith(f"setting {setting.setting_id!r}") for e in errors)
        for b in spec.batch_sizes:
            recs = by_cell.get(cell_id(setting.setting_id, b), [])
            predicted = cell_prediction(spec, setting.setting_id, best_rates, b) if best_rates else None
            key = (setting.setting_id, b, target, prev_resolved, prev_best, at_least, setting_failed, predicted,
                   tuple(record_key(r, lost_set) for r in recs))
            out = _CELL_PLANS.get(key)
            if out is None:
                out = plan_cell(spec, setting, b, recs, target, prev_resolved, prev_best, at_least,
                                setting_failed, lost_set, predicted)
                if len(_CELL_PLANS) >= 20_000:
                    _CELL_PLANS.clear()
                _CELL_PLANS[key] = out
            cells.append(out.cell)
            if out.skipped:
                continue  # resolved for the chain; the bound carries over unchanged
            start.extend(out.start)
            asks.extend(out.ask)
            stop.extend(out.stop)
            if out.incomplete:
                all_done = False
            prev_resolved, prev_best, at_least = out.prev_resolved, out.prev_best, out.at_least

    return Plan(start=tuple(start), ask=tuple(asks), stop=tuple(stop), lost=tuple(lost), fail=tuple(fail),
                targets=targets, cells=tuple(cells), errors=tuple(errors),
                done=all_done and not lost)

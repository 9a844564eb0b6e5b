"""Which planner a study kind uses: ``local`` studies (:mod:`cbscore.study.local_plan`),
``schedule`` studies (:mod:`cbscore.study.decay_plan`), every other kind :mod:`cbscore.study.planner`. The package exports these as ``plan``, ``grid_trials``
and ``grid_tokens``, so a caller never asks which kind it holds."""

from __future__ import annotations

from collections.abc import Sequence

import cbscore.study.decay_plan as decay_plan
import cbscore.study.local_plan as local_plan
import cbscore.study.planner as planner
from cbscore.study.spec import StudySpec
from cbscore.study.trials import TrialRecord


def plan(spec: StudySpec, records: Sequence[TrialRecord], now_s: float, *,
         snapshots: local_plan.LocalSnapshots | decay_plan.DecaySnapshots | None = None, stale_after_s: float = 120.0,
         max_attempts: int = 3) -> planner.Plan:
    """:func:`cbscore.study.planner.plan`, or :func:`~cbscore.study.local_plan.plan_local` with
    ``snapshots`` (what the runner found on disk; without them no branch starts, so a status page
    that passes none sees the cells but starts nothing)."""
    if spec.kind == "schedule":
        return decay_plan.plan_decay(spec, records, now_s, snapshots=snapshots, stale_after_s=stale_after_s,
                                     max_attempts=max_attempts)
    if spec.kind == "local":
        return local_plan.plan_local(spec, records, now_s, snapshots=snapshots, stale_after_s=stale_after_s,
                                     max_attempts=max_attempts)
    return planner.plan(spec, records, now_s, stale_after_s=stale_after_s, max_attempts=max_attempts)


def grid_trials(spec: StudySpec) -> int:
    """Trials of the study if everything ran."""
    if spec.kind == "schedule":
        return decay_plan.decay_grid_trials(spec)
    return local_plan.local_grid_trials(spec) if spec.kind == "local" else planner.grid_trials(spec)


def grid_tokens(spec: StudySpec) -> int:
    """Training tokens of the study if every trial ran its whole budget."""
    if spec.kind == "schedule":  # stable runs, decay branches and cosine runs
        return decay_plan.decay_grid_tokens(spec)
    return local_plan.local_grid_tokens(spec) if spec.kind == "local" else planner.grid_tokens(spec)

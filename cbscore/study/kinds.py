"""Study kinds as plug-ins: one object per ``StudySpec.kind`` answers what differs between kinds,
so a caller asks the kind it holds instead of branching on its name.

The grid kinds (``chinchilla``, ``fixed_n``, ``fixed_d``, ``custom``) plan cells of learning-rate
trials (:mod:`cbscore.study.planner`); ``local`` runs a base run and branches from its snapshots
(:mod:`cbscore.study.local_plan`); ``schedule`` runs stable runs, their decay branches and cosine
runs (:mod:`cbscore.study.decay_plan`). What a kind needs from a higher layer (the workers'
snapshot reading and readouts, the app's panels) is registered in that layer under the same names
(:mod:`workers.studies.kinds`, :mod:`app.kinds`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import cbscore.study.budgets as budgets
import cbscore.study.decay_plan as decay_plan
import cbscore.study.local_plan as local_plan
import cbscore.study.planner as planner
from cbscore.errors import ConfigError
from cbscore.study.spec import KINDS, StudySpec
from cbscore.study.spec_parts import Setting
from cbscore.study.trials import TrialRecord


class StudyKind(Protocol):
    """What a study kind answers for the bottom layer."""

    name: str
    #: its trials stop at a setting's target (a schedule study's runs train their whole horizons)
    stops_at_target: bool

    def plan(self, spec: StudySpec, records: Sequence[TrialRecord], now_s: float, *, snapshots,
             stale_after_s: float, max_attempts: int) -> planner.Plan:
        """The next actions (``snapshots``: what the runner found on disk, ``None`` for a grid kind)."""

    def grid_trials(self, spec: StudySpec) -> int:
        """Trials of the study if everything ran."""

    def grid_tokens(self, spec: StudySpec) -> int:
        """Training tokens of the study if every trial ran its whole budget."""

    def setting_grid_tokens(self, spec: StudySpec, setting: Setting) -> int:
        """The part of :meth:`grid_tokens` one setting trains."""


@dataclass(frozen=True)
class GridKind:
    """A grid of cells (setting × batch size), each a search over learning rates."""

    name: str
    stops_at_target: bool = True

    def plan(self, spec, records, now_s, *, snapshots=None, stale_after_s=120.0, max_attempts=3):
        return planner.plan(spec, records, now_s, stale_after_s=stale_after_s, max_attempts=max_attempts)

    def grid_trials(self, spec):
        return planner.grid_trials(spec)

    def grid_tokens(self, spec):
        return planner.grid_tokens(spec)

    def setting_grid_tokens(self, spec, setting):
        return budgets.setting_grid_tokens(spec, setting)


@dataclass(frozen=True)
class LocalKind:
    """Local CBS: a base run at B0 and branches at larger batch sizes from its snapshots."""

    name: str = "local"
    stops_at_target: bool = True

    def plan(self, spec, records, now_s, *, snapshots=None, stale_after_s=120.0, max_attempts=3):
        return local_plan.plan_local(spec, records, now_s, snapshots=snapshots, stale_after_s=stale_after_s,
                                     max_attempts=max_attempts)

    def grid_trials(self, spec):
        return local_plan.local_grid_trials(spec)

    def grid_tokens(self, spec):
        return local_plan.local_grid_tokens(spec)

    def setting_grid_tokens(self, spec, setting):
        return self.grid_tokens(spec)  # one setting


@dataclass(frozen=True)
class ScheduleKind:
    """One setting under constant+EWA, WSD and cosine schedules: stable runs, decay branches, cosine runs."""

    name: str = "schedule"
    stops_at_target: bool = False

    def plan(self, spec, records, now_s, *, snapshots=None, stale_after_s=120.0, max_attempts=3):
        return decay_plan.plan_decay(spec, records, now_s, snapshots=snapshots, stale_after_s=stale_after_s,
                                     max_attempts=max_attempts)

    def grid_trials(self, spec):
        return decay_plan.decay_grid_trials(spec)

    def grid_tokens(self, spec):  # stable runs, decay branches and cosine runs
        return decay_plan.decay_grid_tokens(spec)

    def setting_grid_tokens(self, spec, setting):
        return self.grid_tokens(spec)  # one setting


#: every kind by its name, in the order of :data:`cbscore.study.spec.KINDS`
STUDY_KINDS: dict[str, StudyKind] = {k.name: k for k in (
    *(GridKind(name) for name in KINDS if name not in ("local", "schedule")), LocalKind(), ScheduleKind())}
assert tuple(STUDY_KINDS) == KINDS, "every kind of StudySpec has one object here"


def study_kind(kind: str | StudySpec) -> StudyKind:
    """The kind object of a spec or a kind's name; :class:`ConfigError` naming ``kind`` for an unknown one."""
    name = kind.kind if isinstance(kind, StudySpec) else kind
    try:
        return STUDY_KINDS[name]
    except (KeyError, TypeError):
        raise ConfigError("kind", name, f"must be one of {', '.join(STUDY_KINDS)}") from None


def plan(spec: StudySpec, records: Sequence[TrialRecord], now_s: float, *,
         snapshots: local_plan.LocalSnapshots | decay_plan.DecaySnapshots | None = None, stale_after_s: float = 120.0,
         max_attempts: int = 3) -> planner.Plan:
    """The kind's plan: :func:`cbscore.study.planner.plan`, or :func:`~cbscore.study.local_plan.plan_local`
    / :func:`~cbscore.study.decay_plan.plan_decay` with ``snapshots`` (what the runner found on disk;
    without them no branch starts, so a status page that passes none sees the cells but starts nothing)."""
    return study_kind(spec).plan(spec, records, now_s, snapshots=snapshots, stale_after_s=stale_after_s,
                                 max_attempts=max_attempts)


def grid_trials(spec: StudySpec) -> int:
    """Trials of the study if everything ran."""
    return study_kind(spec).grid_trials(spec)


def grid_tokens(spec: StudySpec) -> int:
    """Training tokens of the study if every trial ran its whole budget."""
    return study_kind(spec).grid_tokens(spec)


def require_kind(name: str, spec: StudySpec, kind: str) -> None:
    """Refuse study ``name`` unless its spec is of kind ``kind`` (a command of that kind's own)."""
    if spec.kind != kind:
        raise ConfigError("name", name, f"names a {spec.kind} study, not a {kind} one")

"""What a study kind needs from the workers' layer, keyed by the kind's name as
:data:`cbscore.study.kinds.STUDY_KINDS` is: which snapshots the runner reads from disk before it
plans, the largest trial the launch checks hold against the token store, the dry run's lines of
the first wave, and the readout ``cbs study fit`` / ``cbs study export`` print (``None``: the
lab's fit of S(B) through :mod:`workers.query.api`, which this package sits below)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cbscore.study import StudySpec, TrialRecord, build_train_config, planned_budget
from cbscore.study.kinds import STUDY_KINDS, study_kind
from cbscore.study.planner import Plan


@dataclass(frozen=True)
class WorkerKind:
    """One kind's behaviour in the workers."""

    name: str
    #: the snapshots on disk the kind's planner reads (the pure planner reads no disk); ``None``: none
    snapshots: Callable[[StudySpec, Sequence[TrialRecord]], object] | None
    #: ``(tokens the longest trial reads, setting id, batch size)``, every trial's config built on the way
    largest_trial: Callable[[StudySpec], tuple[int, str, int]]
    #: the dry run's lines after the throughput (the first wave and what it runs)
    dry_run_lines: Callable[[StudySpec, Plan, Callable[[float], str]], list[str]]
    #: the dry run ends on the recipe of every cell (``workers.cli.describe_recipe``)
    shows_recipe: bool = True
    #: ``cbs study fit``'s readout of a study by name, ``(name, bootstrap=, seed=)``, and its text
    readout: Callable[..., object] | None = None
    format_readout: Callable[[object], str] | None = None
    #: the readout as ``cbs study fit --json`` prints it (``None``: the readout is that JSON already)
    readout_json: Callable[[object], dict] | None = None
    #: ``cbs study export``'s rows of a study by name
    table: Callable[[str], list[dict]] | None = None

    def json_of_readout(self, out) -> dict:
        """The JSON of a readout of this kind (``cbs study fit NAME --json``)."""
        return out if self.readout_json is None else self.readout_json(out)

    def study_snapshots(self, spec: StudySpec, records: Sequence[TrialRecord]):
        return None if self.snapshots is None else self.snapshots(spec, records)


def grid_largest_trial(spec: StudySpec) -> tuple[int, str, int]:
    """Build every cell's ``TrainConfig`` once (a batch size the budget cannot hold, a bad data
    setting, ... fail here with the trainer's own message, not in a worker hours later) and return
    the largest trial's tokens, setting id and batch size."""
    from cbscore.train.config import TrainConfig

    largest = (0, "", 0)
    for setting in spec.resolve_settings():
        for b in spec.batch_sizes:
            _, cap, role_tokens = planned_budget(spec, setting, b)
            for lr in (spec.search.lrs if spec.search.kind == "grid" else (spec.search.lr_min,)):
                config = TrainConfig.from_dict(build_train_config(
                    spec, setting, batch_size=b, lr=lr, seed=spec.seeds[0], max_tokens=role_tokens, max_steps=cap,
                    target_loss=None))
                largest = max(largest, (config.total_steps * config.batch_tokens, setting.setting_id, b))
    return largest


def _grid_lines(spec: StudySpec, first: Plan, human) -> list[str]:
    lines = [f"first wave: {len(first.start)} reference trials"
             + (f" and {sum(a.count for a in first.ask)} Optuna asks" if first.ask else "")]
    if spec.search.kind == "chained":  # which rates each cell runs, and when
        from cbscore.study.chained import describe_chained

        lines.extend(describe_chained(spec))
    return lines


def _local_snapshots(spec, records):
    from workers.studies.local_study import local_snapshots

    return local_snapshots(spec, records)


def _local_largest(spec):
    from workers.studies.local_study import largest_trial

    return largest_trial(spec)


def _local_lines(spec, first, human):  # base runs, then branches from their snapshots, one recipe (the base's)
    from workers.studies.local_study import describe_local

    return describe_local(spec)


def _local_readout(name, *, bootstrap=1000, seed=0):  # a local-CBS readout, not a fit of S(B)
    from workers.studies.local_fit import local_fit

    return local_fit(name)


def _local_format(out):  # a LocalStudyReadout
    from workers.studies.local_fit import format_local

    return format_local(out)


def _local_json(out):
    return out.to_json_dict()


def _schedule_snapshots(spec, records):  # which stable-run snapshots exist
    from workers.studies.decay_study import decay_snapshots

    return decay_snapshots(spec, records)


def _schedule_largest(spec):  # stable runs, decay branches and cosine runs: every config built
    from workers.studies.decay_study import largest_trial

    return largest_trial(spec)


def _schedule_lines(spec, first, human):  # stable runs, their decay branches and cosine runs, with their tokens
    from cbscore.study.decay_plan import describe_decay

    return describe_decay(spec, human)


def _schedule_readout(name, *, bootstrap=1000, seed=0):  # S(B) and B* per schedule, and WSD's E(S)
    from workers.studies.schedule_fit import schedule_fit

    return schedule_fit(name, bootstrap=bootstrap, seed=seed)


def _schedule_format(out):  # a ScheduleReadout
    from cbscore.study.decay_readout import format_schedule

    return format_schedule(out)


def _schedule_json(out):
    return out.to_json_dict()


def _schedule_table(name):  # one steps table per schedule, in one CSV
    from workers.studies.schedule_fit import schedule_table

    return schedule_table(name)


_LOCAL = WorkerKind("local", snapshots=_local_snapshots, largest_trial=_local_largest, dry_run_lines=_local_lines,
                    shows_recipe=False, readout=_local_readout, format_readout=_local_format,
                    readout_json=_local_json)
_SCHEDULE = WorkerKind("schedule", snapshots=_schedule_snapshots, largest_trial=_schedule_largest,
                       dry_run_lines=_schedule_lines, readout=_schedule_readout, format_readout=_schedule_format,
                       readout_json=_schedule_json, table=_schedule_table)
#: every kind of :data:`cbscore.study.kinds.STUDY_KINDS` by its name; the grid kinds share one behaviour
WORKER_KINDS: dict[str, WorkerKind] = {
    name: WorkerKind(name, snapshots=None, largest_trial=grid_largest_trial, dry_run_lines=_grid_lines)
    for name in STUDY_KINDS} | {"local": _LOCAL, "schedule": _SCHEDULE}


def worker_kind(kind: str | StudySpec) -> WorkerKind:
    """The workers' side of a spec's kind (or a kind's name); :class:`ConfigError` naming ``kind`` for an unknown one."""
    return WORKER_KINDS[study_kind(kind).name]


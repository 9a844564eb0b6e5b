"""The readout of a ``schedule`` study from MLflow: ``cbs study fit NAME`` and ``cbs study export
NAME`` for ``kind: schedule`` (:func:`cbscore.study.decay_readout.schedule_readout`: each
schedule's target, steps table, S(B), B_noise and B*, and WSD's E(S) fits). Everything is
recomputed from MLflow alone: the stable runs' EWA histories and every decayed run's final
raw-weights loss."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cbscore.study.decay_readout import ScheduleReadout


def schedule_records(name: str):
    """``(spec, records with evaluation histories)`` of study ``name`` (a schedule study)."""
    from workers.studies.local_fit import kind_records

    spec, records, _ = kind_records(name, "schedule", with_history=True)
    return spec, records


def schedule_fit(name: str, *, bootstrap: int = 1000, seed: int = 0) -> ScheduleReadout:
    """Study ``name``'s readout (``.to_json_dict()``: the JSON of ``cbs study fit NAME --json``)."""
    from cbscore.study.decay_readout import schedule_readout

    spec, records = schedule_records(name)
    return schedule_readout(spec, records, bootstrap=bootstrap, seed=seed)


def schedule_table(name: str) -> list[dict]:
    """Every schedule's steps table in one (``setting`` = ``{setting}.{schedule}``): the CSV ``cbs fit`` reads."""
    from cbscore.study.decay_readout import schedule_rows, schedule_targets

    spec, records = schedule_records(name)
    targets, _ = schedule_targets(spec, records)
    rows = schedule_rows(spec, records, targets)
    return [r.to_json_dict() for schedule in spec.decay.schedules for r in rows.get(schedule, [])]

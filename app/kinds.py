"""What a study kind needs from the app, keyed by the kind's name as
:data:`cbscore.study.kinds.STUDY_KINDS` is: whether the Local CBS page lists it, the Curves and
Scaling laws pages' own view of it (``None``: the grid's, from its steps table), and the tables,
readout and learning-rate edges ``cbs report`` writes for it. The panels are imported when drawn,
so a CLI module may ask."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cbscore.analysis import StepsRow
from cbscore.study import StudySpec
from cbscore.study.decay_plan import same_rates_at_every_b
from cbscore.study.kinds import STUDY_KINDS, study_kind


@dataclass(frozen=True)
class AppKind:
    """One kind's behaviour in the app."""

    name: str
    #: its CBS is local (the Local CBS page lists it; it is never set beside one as a global CBS)
    local_cbs: bool = False
    #: the Curves / Scaling laws page of a study of this kind, drawn in place of the grid's
    curves: Callable[[str], None] | None = None
    scaling: Callable[[str], None] | None = None
    #: ``cbs report``'s steps table of a study by name (``None``: the lab's, ``api.study_table``)
    report_table: Callable[[str], list[StepsRow]] | None = None
    #: ``cbs report``'s extra readout files of a study by name, written into a folder
    report_readout: Callable[[str, Path], None] | None = None
    #: whether a spec's grid search runs the same rates at every batch size (then ``cbs report``
    #: says which best rates sit at an end of that one set); ``None``: it always does
    same_rates_at_every_b: Callable[[StudySpec], bool] | None = None


def _schedule_curves(name: str) -> None:  # one setting under three schedules, each its own target
    from app import schedule_panels

    schedule_panels.render_curves(name)


def _schedule_scaling(name: str) -> None:  # B_noise, B* per schedule and WSD's E(S) fits
    from app import schedule_panels

    schedule_panels.render_scaling(name)


def _schedule_table(name: str) -> list[StepsRow]:  # one steps table per schedule, read off the decayed runs
    from workers.query import api

    return api.study_schedule_table(name)


def _schedule_readout(name: str, folder: Path) -> None:  # `cbs study fit`'s per-schedule readout, WSD's E(S)
    import json

    from cbscore.study.decay_readout import format_schedule
    from workers.query import api

    readout = api.study_schedule_fit(name)
    (folder / "schedules.json").write_text(json.dumps(readout.to_json_dict(), indent=2, allow_nan=False) + "\n")
    (folder / "schedules.txt").write_text(format_schedule(readout) + "\n")


#: every kind of :data:`cbscore.study.kinds.STUDY_KINDS` by its name; the grid kinds share one behaviour
APP_KINDS: dict[str, AppKind] = {name: AppKind(name) for name in STUDY_KINDS} | {
    "local": AppKind("local", local_cbs=True),
    "schedule": AppKind("schedule", curves=_schedule_curves, scaling=_schedule_scaling,
                        report_table=_schedule_table, report_readout=_schedule_readout,
                        same_rates_at_every_b=same_rates_at_every_b),
}


def app_kind(kind: str | StudySpec) -> AppKind:
    """The app's side of a spec's kind (or a kind's name); :class:`ConfigError` naming ``kind`` for an unknown one."""
    return APP_KINDS[study_kind(kind).name]


def study_app_kind(name: str) -> AppKind | None:
    """The app's side of study ``name``'s kind; ``None`` where its spec names none the app knows."""
    from app import sources

    return APP_KINDS.get(getattr(sources.spec(name), "kind", None))


def has_local_cbs(kind: str) -> bool:
    """Whether a study of kind ``kind`` (a name from a study's summary) measures a local CBS."""
    return kind in APP_KINDS and APP_KINDS[kind].local_cbs

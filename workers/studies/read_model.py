"""The pages' read model of ended trials: a study read from the ledger, with MLflow as the record.

Reading a study from MLflow builds an entity per tag, param and metric of every run (about 60,000
for 1,000 trials: seconds on a page's first visit). The ledger already knows every trial (its
lease), so when a trial has ended (its lease done, its run ended) the ledger keeps what the reads
need of it in ``cbs_trial_results``: its outcome, steps to target, the curves the planner and the
pages read (``eval/loss_ewa``; a reference trial's ``gns/b_simple``, the forecast's input) and the tags
and latest metrics its run ended with (not its params, nor its ``trial_spec``, which only the
runner and the trial read, from MLflow). The trial keeps its row when it ends
(:func:`keep_ended`); :func:`study_runs` gives a study's trial runs from those rows and asks MLflow
only for the rest (the trials in flight, and ended ones without a row: a lab whose ledger predates
the table, a trial ended by the runner), keeping each ended one as it reads it.

A row serves only while its lease is as it was kept (``lease_updated_s``): a trial that runs again
is read from MLflow until it ends again. A study the ledger does not index whole (no lease at all,
or a lease without its run) is read from MLflow alone, as before the read model.

A process remembers the ended trials it has read (:data:`_SERVED`: the kept run and its records,
under the whole lease they were read for), so a page's later reads of the same study (its table,
its records, its forecast: three on the Curves page) ask the ledger only for the leases and MLflow
only for the trials in flight. A row cannot change while its lease stays the same (a row is kept
only where none serves), so what is remembered is what the row would give; :func:`forget` empties
it (a new process).

The fits the pages compute of a study's steps table (a thousand bootstrap resamples per setting)
are kept too (``cbs_study_fits``, :func:`kept_fit`), under a key of the table, the fit's settings
and the analysis code itself, so a page on another host or after a restart reads the fit the
first one computed, and any change of the table or of the code is a new key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import pickle
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from cbscore.study import TrialRecord
from workers.infra.parse import as_float
from workers.studies.ledger import Lease, Ledger, TrialResultRow
from workers.studies.records import build_records, record_from_run, trial_status
from workers.tracking import EVAL_CURVE_TAG, TERMINAL_RUN_STATUSES, Tracker

log = logging.getLogger(__name__)

#: The held-out loss of the averaged weights: the curve every read of a trial uses.
EVAL_KEY = "eval/loss_ewa"
#: The smoothed gradient noise scale, kept for reference trials (the noise-scale forecast reads it).
GNS_KEY = "gns/b_simple"
#: Tags a row does not keep: the trial's spec (read from MLflow by the runner and the trial only)
#: and the eval curve's tag (kept as a curve).
_UNKEPT_TAGS = frozenset({"trial_spec", EVAL_CURVE_TAG})
#: Run ids per MLflow query when the trials in flight are read by id.
_IDS_PER_QUERY = 100
#: Fits kept per study, the newest (its own B_ref and r, and a few the pages were moved to).
FITS_KEPT = 4
#: Studies whose ended trials a process remembers (:data:`_SERVED`), the most recently read: a page
#: and the studies it compares (about 9 MB per 1,000 trials remembered).
STUDIES_REMEMBERED = 8

Curve = tuple[tuple[float, ...], tuple[float, ...]]


@dataclass(frozen=True, kw_only=True)
class StoredInfo:
    """What a kept run says of itself, under the names of MLflow's ``RunInfo``."""

    run_id: str
    experiment_id: str
    status: str
    """MLflow's run status when it ended (``FINISHED``, ``KILLED``, ``FAILED``)."""
    start_time: int
    """Unix milliseconds."""
    end_time: int | None


@dataclass(frozen=True, kw_only=True)
class StoredData:
    """A kept run's tags and latest metric values, under the names of MLflow's ``RunData``."""

    tags: Mapping[str, str]
    metrics: Mapping[str, float]
    params: Mapping[str, str] = field(default_factory=dict)
    """Not kept: always empty."""


@dataclass(frozen=True, kw_only=True)
class StoredRun:
    """An ended trial run as the read model keeps it; reads like MLflow's ``Run`` where the study
    reads use one (``info``, ``data``), with its kept ``curves``."""

    info: StoredInfo
    data: StoredData
    curves: Mapping[str, Curve]
    """Kept metric histories ``{key: (steps, values)}``; a key kept with no points was never logged."""


class Histories:
    """``history(run, key) -> (steps, values)``: a kept run's curve, else the tracker's (MLflow, cached
    once the run has ended). What :func:`workers.studies.records.build_records` reads curves with."""

    def __init__(self, tracker: Tracker):
        self.tracker = tracker

    def history(self, run, key: str) -> Curve:
        curves = getattr(run, "curves", None)
        if curves is not None and key in curves:
            return curves[key]
        return self.tracker.history(run, key)


def _curve_json(curve: Curve) -> list[list[float]]:
    steps, values = curve
    return [[float(s) for s in steps], [float(v) for v in values]]


def result_row(run, lease: Lease, histories: Histories) -> TrialResultRow:
    """The read model's row of an ended trial: its MLflow ``run`` (ended) and its ``lease`` (done)."""
    tags, metrics = run.data.tags, run.data.metrics
    curves = {EVAL_KEY: _curve_json(histories.history(run, EVAL_KEY))
              if EVAL_KEY in metrics or tags.get(EVAL_CURVE_TAG) else [[], []]}
    if tags.get("role") == "reference":
        curves[GNS_KEY] = _curve_json(histories.history(run, GNS_KEY)) if GNS_KEY in metrics else [[], []]
    kept = {"experiment_id": run.info.experiment_id, "status": run.info.status,
            "start_time": run.info.start_time, "end_time": run.info.end_time,
            "tags": {k: v for k, v in tags.items() if k not in _UNKEPT_TAGS}, "metrics": dict(metrics)}
    status = trial_status(tags, lease)
    return TrialResultRow(
        trial_id=lease.trial_id, study=lease.study, run_id=run.info.run_id, lease_updated_s=lease.updated_s,
        outcome=status, steps_to_target=as_float(metrics.get("summary/steps_to_target")) if status == "reached" else None,
        curves=json.dumps(curves, separators=(",", ":")), run=json.dumps(kept, separators=(",", ":")))


def stored_run(row: TrialResultRow) -> StoredRun:
    """The run a row keeps."""
    kept: dict[str, Any] = json.loads(row.run)
    curves = {k: (tuple(steps), tuple(values)) for k, (steps, values) in json.loads(row.curves).items()}
    return StoredRun(info=StoredInfo(run_id=row.run_id, experiment_id=kept["experiment_id"], status=kept["status"],
                                     start_time=kept["start_time"], end_time=kept["end_time"]),
                     data=StoredData(tags=kept["tags"], metrics=kept["metrics"]), curves=curves)


def serves(row: TrialResultRow | None, lease: Lease) -> bool:
    """Whether ``row`` is the ended trial that ``lease`` says now (not a run before a re-run)."""
    return (row is not None and lease.state == "done" and row.run_id == lease.run_id
            and row.lease_updated_s == lease.updated_s)


def keep_ended(ledger: Ledger, tracker: Tracker, trial_id: str) -> bool:
    """Keep ``trial_id``'s row if it has ended (lease done, run ended); whether it was kept. The
    trial calls it once its lease is done (one run read and, for a reference trial, one history)."""
    lease = ledger.lease(trial_id)
    if lease is None or lease.state != "done" or not lease.run_id:
        return False
    run = tracker.get_run(lease.run_id)
    if run.info.status not in TERMINAL_RUN_STATUSES:
        return False
    ledger.keep_result(result_row(run, lease, Histories(tracker)))
    return True


def _runs_by_id(tracker: Tracker, experiment_id: str, run_ids: list[str]) -> list:
    out = []
    for i in range(0, len(run_ids), _IDS_PER_QUERY):
        ids = ", ".join(f"'{r}'" for r in run_ids[i:i + _IDS_PER_QUERY])
        out += tracker.runs(experiment_id, f"attributes.run_id IN ({ids})")
    return out


@dataclass(frozen=True)
class _Served:
    """An ended trial this process has read: its ``lease`` then, its kept ``run``, and its records
    by ``with_history`` (:func:`study_records`), filled as they are asked for."""

    lease: Lease
    run: StoredRun
    records: dict = field(default_factory=dict, compare=False)


#: Per study (the most recently read :data:`STUDIES_REMEMBERED`), its ended trials served by the
#: read model as this process read them: ``{trial_id: _Served}`` (module docstring).
_SERVED: OrderedDict[str, dict[str, _Served]] = OrderedDict()
_SERVED_LOCK = threading.Lock()


def forget() -> None:
    """Forget every ended trial this process remembers (what a new process starts with)."""
    with _SERVED_LOCK:
        _SERVED.clear()


def _remember(study: str, served: dict[str, _Served]) -> None:
    with _SERVED_LOCK:
        _SERVED[study] = served
        _SERVED.move_to_end(study)
        while len(_SERVED) > STUDIES_REMEMBERED:
            _SERVED.popitem(last=False)


def _read(tracker: Tracker, ledger: Ledger, study: str, parent) -> tuple[list, dict[str, Lease], dict[str, _Served] | None]:
    """``(trial runs, leases, the ended trials served by the read model)`` of ``study``; ``None``
    in place of the last where the ledger does not index the study whole (read from MLflow)."""
    leases = ledger.leases(study)
    if not leases or any(not lease.run_id or not lease.run_id.isalnum() for lease in leases.values()):
        return tracker.trial_runs(parent.info.experiment_id, parent.info.run_id), leases, None
    with _SERVED_LOCK:
        known = _SERVED.get(study, {})
    rows: dict[str, TrialResultRow] | None = None
    served: dict[str, _Served] = {}
    wanted: dict[str, Lease] = {}
    for trial_id, lease in leases.items():
        hit = known.get(trial_id)
        if hit is not None and hit.lease == lease:  # the same lease: the same row (module docstring)
            served[trial_id] = hit
            continue
        if lease.state == "done" and rows is None:  # one query, only when an ended trial is new here
            rows = ledger.results(study)
        row = rows.get(trial_id) if rows is not None else None
        if serves(row, lease):
            served[trial_id] = _Served(lease=lease, run=stored_run(row))
        else:
            wanted[lease.run_id] = lease
    _remember(study, served)
    runs: list = [s.run for s in served.values()]
    histories = Histories(tracker)
    for run in _runs_by_id(tracker, parent.info.experiment_id, sorted(wanted)):
        runs.append(run)
        lease = wanted[run.info.run_id]
        if lease.state == "done" and run.info.status in TERMINAL_RUN_STATUSES:
            try:
                ledger.keep_result(result_row(run, lease, histories))
            except SQLAlchemyError as exc:  # the read stands; the row is kept by a later read
                log.warning("the read model could not keep trial %s: %s", lease.trial_id, exc)
    return runs, leases, served


def study_runs(tracker: Tracker, ledger: Ledger, study: str, parent) -> tuple[list, dict[str, Lease]]:
    """``(trial runs, leases)`` of ``study`` (``parent``: its MLflow parent run): kept runs for the
    ended trials the read model holds, MLflow's for the rest; an ended one read from MLflow is kept
    for the next read."""
    runs, leases, _ = _read(tracker, ledger, study, parent)
    return runs, leases


def study_records(tracker: Tracker, ledger: Ledger, study: str, parent, *,
                  with_history: bool | None = None) -> tuple[list, dict[str, Lease], Histories, list[TrialRecord]]:
    """``(trial runs, leases, their histories, records)`` of ``study``: :func:`study_runs` and
    :func:`workers.studies.records.build_records` of them, each ended trial's records built once per
    process while its lease stays the same."""
    runs, leases, served = _read(tracker, ledger, study, parent)
    histories = Histories(tracker)
    if served is None:
        return runs, leases, histories, build_records(runs, leases, histories, with_history=with_history)
    rest = runs[len(served):]
    # build_records keeps one run per trial_id tag: a kept run is its trial's only run where the tags
    # agree with the lease it serves (always, short of a store edited by hand: then build them all)
    tags = {run.data.tags.get("trial_id") for run in rest}
    if any(s.run.data.tags.get("trial_id") != t or t in tags for t, s in served.items()):
        return runs, leases, histories, build_records(runs, leases, histories, with_history=with_history)
    records = build_records(rest, leases, histories, with_history=with_history)
    for s in served.values():
        record = s.records.get(with_history)
        if record is None and with_history is False and s.records:
            # with_history only says whether the record carries its eval curve: drop it from one built
            record = next(iter(s.records.values()))
            if record.eval_steps or record.eval_losses:
                record = dataclasses.replace(record, eval_steps=(), eval_losses=())
            s.records[with_history] = record
        if record is None:  # from the kept run alone (its curves are kept): the same on every read
            record = s.records[with_history] = record_from_run(s.run, s.lease, histories, with_history=with_history)
        records.append(record)
    records.sort(key=lambda r: r.trial_id)
    return runs, leases, histories, records


# --------------------------------------------------------------------------- kept fits
@cache
def _analysis_code() -> str:
    """A digest of :mod:`cbscore.analysis`'s source: a fit kept by other code is not this code's."""
    import cbscore.analysis

    digest = hashlib.sha256()
    for path in sorted(Path(cbscore.analysis.__file__).parent.rglob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def fit_key(rows: list[dict], settings: Mapping[str, Any]) -> str:
    """The key of a fit of ``rows`` with ``settings`` (keyword arguments of the analysis)."""
    text = json.dumps([list(rows), dict(settings), _analysis_code()], sort_keys=True, default=repr,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def kept_fit(ledger: Ledger, study: str, key: str):
    """The fit kept under ``key``, or ``None`` (none kept, or one this process cannot read)."""
    blob = ledger.kept_fit(study, key)
    if blob is None:
        return None
    try:
        return pickle.loads(zlib.decompress(blob))
    except Exception as exc:  # noqa: BLE001 - written by other code: fitted again and kept anew
        log.warning("the kept fit %s of study %s cannot be read (%s): fitting again", key[:12], study, exc)
        return None


def keep_fit(ledger: Ledger, study: str, key: str, fit) -> None:
    """Keep ``fit`` (a frozen analysis result) under ``key``; the study's :data:`FITS_KEPT` newest stay."""
    ledger.keep_fit(study, key, zlib.compress(pickle.dumps(fit, protocol=pickle.HIGHEST_PROTOCOL), 1),
                    now_s=time.time(), most=FITS_KEPT)

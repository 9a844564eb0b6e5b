"""Deleting a study as a whole: ``cbs study delete`` and the Studies page's "Delete study…".

A study leaves traces in five places, and :func:`delete_study` removes them in this order, each
step idempotent, so that a delete that stopped half-way (a crash, a store that went away) is
finished by running it again:

1. **mark** it: its experiment's ``cbs.study`` tag becomes ``deleting`` (so the studies list, the
   runner's passes and trial reuse stop seeing it at once), ``cbs.deleted_name`` keeps its name,
   and its parent run's ``status`` becomes ``deleting``;
2. **files**: every trial's checkpoint folder (``<checkpoint root>/<study>.*``: ``CBS_CHECKPOINT_DIR``,
   else ``$CBS_HOME/checkpoints``; removed even with ``CBS_KEEP_CHECKPOINTS``), the study's kept
   artifacts (a local study's base-run snapshots, :func:`workers.studies.local_study.delete_study_artifacts`)
   and this host's read caches of its runs (``$CBS_HOME/cache``);
3. its **Optuna** studies (``{study}/{cell}``, :mod:`workers.studies.search`), where it has any;
4. its **ledger** rows: the trials' leases (with their outcomes) and the pinned token store;
5. its **MLflow runs**, the trial runs and then the parent run, with MLflow's ``delete_run``: a
   *soft* delete (the runs, their metrics and artifacts stay in the store, marked deleted, until
   ``mlflow gc`` purges them);
6. its **experiment**: renamed ``{study}.deleted-{experiment id}`` (MLflow keeps a deleted
   experiment's name taken; renamed, the name is free for a new study) and soft-deleted;
7. its advance lock in the ledger, held by the delete from start to end so that no runner pass
   starts a trial beside it.

The marker is what lets a second run find a half-deleted study: by its name until step 6, and by
``cbs.deleted_name`` after the rename (then only step 6 is left). What is not deleted: the token
store (shared by every study on the same data), the MLflow artifacts of the soft-deleted runs
(``mlflow gc``), task messages still in the broker (a worker that takes one finds no lease and
drops it), and other hosts' read caches.

**Trials in flight.** A study with trials queued or running (a lease not done, or a trial run
``SCHEDULED``/``RUNNING`` in MLflow) is refused with :class:`StudyInFlight`, naming the study and how
many. ``force=True`` first cancels it (:meth:`workers.studies.runner.Runner.cancel_study`: queued trials end
at once, running ones stop at their next heartbeat), then waits until none is left in flight,
repairing what a lost holder left (:meth:`~workers.studies.runner.Runner.repair_ended`), for at most
``wait_s``; past that it stops with nothing deleted.

**Trials other studies reused** (:mod:`workers.studies.reuse`). A reused trial is a *copy*: a run of the
other study holding every metric history and result tag of the source, tagged ``reused_from``
(the source run) and ``reused_from_study``. So deleting the source study takes nothing from the
studies that reused its trials: they keep their own copies, their tables and fits do not change,
and their "reused from" column goes on naming the (now deleted) source run. The delete names them
(:attr:`DeletionReport.dependants`). A later study with the same trial config finds no source in
the deleted study and reuses one of the copies, or trains.

**Who may delete.** The workers layer knows no users: its callers check. The Studies page allows
the study's owner or an admin (``app.auth.check_change``, the rule for extending and retrying);
the CLI is the operator on the host, as for ``cbs study cancel``.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from cbscore import paths
from cbscore.errors import CbsError, ConfigError
from workers.infra.settings import WorkerSettings
from workers.studies.ledger import Ledger, this_process
from workers.studies.repair import Repairs
from workers.tracking import Tracker

_log = logging.getLogger(__name__)

#: Tags of a study's experiment: a study (``1``) or one being deleted (``deleting``), and its name.
STUDY_TAG, DELETED_NAME_TAG = "cbs.study", "cbs.deleted_name"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


class StudyInFlight(CbsError):
    """The study has trials queued or running; the message names it and how many."""

    def __init__(self, study: str, trial_ids: tuple[str, ...]):
        self.study, self.trial_ids = study, trial_ids
        shown = ", ".join(trial_ids[:3]) + (", ..." if len(trial_ids) > 3 else "")
        super().__init__(
            f"study {study!r} has {len(trial_ids)} trial(s) queued or running ({shown}), so it was not deleted; "
            f"cancel it first (`cbs study cancel {study}`) and delete it once they have stopped, or delete it with "
            "--force (which cancels it and waits for its trials to stop)")


@dataclass(frozen=True, kw_only=True)
class DeletionPreview:
    """What :func:`delete_study` would delete (nothing is changed to find out)."""

    study: str
    owner: str
    """The study's ``owner`` tag (who launched it)."""
    status: str
    """``running``, ``done``, ``cancelled``, or ``deleting`` for a delete that stopped half-way."""
    runs: int
    """MLflow runs not yet deleted, the parent run included."""
    in_flight: tuple[str, ...]
    """Trials queued or running (the delete refuses them without ``force``)."""
    dependants: tuple[str, ...]
    """Other studies holding copies of this study's trials (they keep them)."""


@dataclass(frozen=True, kw_only=True)
class DeletionReport:
    """What :func:`delete_study` did."""

    study: str
    experiment_id: str
    deleted_as: str
    """The experiment's name in MLflow now (soft-deleted: ``mlflow gc`` purges it)."""
    cancelled: int = 0
    """Trials stopped by ``force`` before the delete."""
    runs_deleted: int = 0
    """MLflow runs soft-deleted by this call (trial runs and the parent)."""
    leases_deleted: int = 0
    checkpoints_removed: int = 0
    artifacts_removed: bool = False
    optuna_studies_deleted: int = 0
    dependants: tuple[str, ...] = ()
    """Other studies holding copies of this study's trials; they keep them (module docstring)."""
    resumed: bool = False
    """This call finished a delete that had stopped half-way."""


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError("name", name, "names no study")


def _find(tracker: Tracker, name: str):
    """``(experiment, renamed)``: the active experiment of study ``name`` (``None`` when there is
    none) and the experiments of earlier deletes of ``name`` that stopped between their rename and
    their deletion. A study deleted in MLflow's UI, not here, is refused with what to do."""
    client = tracker.client
    exp = client.get_experiment_by_name(name)
    if exp is not None and exp.tags.get(STUDY_TAG) not in ("1", "deleting"):
        raise ConfigError("name", name, "names an MLflow experiment that is not a CBS study")
    if exp is not None and exp.lifecycle_stage != "active":
        raise ConfigError("name", name, f"names a study whose MLflow experiment {exp.experiment_id} was deleted "
                                        "outside CBS Lab; restore it (`mlflow experiments restore --experiment-id "
                                        f"{exp.experiment_id}`) and delete the study again here")
    renamed = [e for e in tracker.experiments_tagged(DELETED_NAME_TAG, name) if e.name != name]
    return exp, renamed


def _unknown(tracker: Tracker, name: str) -> ConfigError:
    gone = tracker.experiments_tagged(DELETED_NAME_TAG, name, deleted=True, max_results=1)
    return ConfigError("name", name, "names no study" + (" (a study of this name was deleted)" if gone else ""))


def _runs(tracker: Tracker, experiment_id: str, flt: str = "", *, deleted_too: bool = False) -> list:
    return tracker.runs(experiment_id, flt, deleted_too=deleted_too)


def _parent(tracker: Tracker, exp):
    run_id = exp.tags.get("cbs.parent_run_id")
    return tracker.client.get_run(run_id) if run_id else None  # a soft-deleted run is still read


def _in_flight(tracker: Tracker, ledger: Ledger, name: str, experiment_id: str) -> tuple[str, ...]:
    """Trials of ``name`` queued or running: a lease not done, or a trial run SCHEDULED/RUNNING."""
    ids = {tid for tid, lease in ledger.leases(name).items() if lease.state != "done"}
    for status in ("RUNNING", "SCHEDULED"):
        ids |= {r.data.tags["trial_id"] for r in _runs(tracker, experiment_id, f"attributes.status = '{status}'")
                if r.data.tags.get("trial_id")}  # (the parent run is RUNNING while the study runs)
    return tuple(sorted(ids))


def _dependants(tracker: Tracker, name: str, experiment_id: str) -> tuple[str, ...]:
    """Other studies whose trial runs are copies of this study's runs (:mod:`workers.studies.reuse`)."""
    ours = {r.info.run_id for r in _runs(tracker, experiment_id, deleted_too=True)}
    others, token = [], None
    while True:
        page = tracker.client.search_experiments(filter_string=f"tags.`{STUDY_TAG}` = '1'", max_results=1000,
                                                 page_token=token)
        others += [e.experiment_id for e in page if e.experiment_id != experiment_id]
        token = page.token
        if not token:
            break
    found = set()
    for i in range(0, len(others), 100):  # MLflow searches a bounded list of experiments at once
        chunk, token = others[i:i + 100], None
        while True:
            page = tracker.client.search_runs(chunk, f"tags.reused_from_study = '{name}'", max_results=1000,
                                              page_token=token)
            found |= {r.data.tags.get("study", "") for r in page if r.data.tags.get("reused_from") in ours}
            token = page.token
            if not token:
                break
    return tuple(sorted(found - {""}))


def deletion_preview(name: str, *, settings: WorkerSettings | None = None) -> DeletionPreview:
    """What deleting ``name`` would delete, and what stands in the way; an unknown study raises
    :class:`ConfigError` naming it."""
    _check_name(name)
    s = settings or WorkerSettings.from_env()
    tracker, ledger = Tracker(s.tracking_uri, s.artifact_root), Ledger(s.ledger_url)
    exp, renamed = _find(tracker, name)
    if exp is None:
        if not renamed:
            raise _unknown(tracker, name)
        return DeletionPreview(study=name, owner="", status="deleting", runs=0, in_flight=(), dependants=())
    parent = _parent(tracker, exp)
    tags = parent.data.tags if parent is not None else {}
    status = "deleting" if exp.tags.get(DELETED_NAME_TAG) else tags.get("status", "")
    return DeletionPreview(study=name, owner=tags.get("owner", ""), status=status,
                           runs=len(_runs(tracker, exp.experiment_id)),
                           in_flight=_in_flight(tracker, ledger, name, exp.experiment_id),
                           dependants=_dependants(tracker, name, exp.experiment_id))


def delete_study(name: str, *, force: bool = False, wait_s: float | None = None,
                 settings: WorkerSettings | None = None) -> DeletionReport:
    """Delete study ``name`` as a whole (module docstring); returns what was deleted.

    ``force``: cancel a study with trials queued or running, and wait up to ``wait_s`` seconds
    (default: three staleness limits, ``3·CBS_STALE_AFTER_S``) for them to stop; without it such a
    study raises :class:`StudyInFlight`. An unknown study raises :class:`ConfigError` naming it.
    Running it again after it stopped half-way finishes the job.
    """
    _check_name(name)
    s = settings or WorkerSettings.from_env()
    tracker, ledger = Tracker(s.tracking_uri, s.artifact_root), Ledger(s.ledger_url)
    exp, renamed = _find(tracker, name)
    for old in renamed:  # an earlier delete that stopped after its rename: only its deletion is left
        _delete_runs(tracker, old.experiment_id)
        tracker.client.delete_experiment(old.experiment_id)
    if exp is None:
        if not renamed:
            raise _unknown(tracker, name)
        old = renamed[-1]
        return DeletionReport(study=name, experiment_id=old.experiment_id, deleted_as=old.name, resumed=True)
    owner = f"{this_process()}:delete"  # not the runner's owner id: a runner in this process is shut out too
    _take_lock(ledger, name, owner, s)
    try:
        from workers.studies.runner import Runner
        from workers.studies.study_lock import LockKeeper

        with LockKeeper(ledger, name, owner, Runner.lock_ttl_s):
            report = _delete_locked(tracker, ledger, s, name, exp, force=force, wait_s=wait_s)
    except BaseException:
        _release_lock(ledger, name, owner)
        raise
    ledger.forget_lock(name)
    return report


def _take_lock(ledger: Ledger, name: str, owner: str, s: WorkerSettings) -> None:
    """The study's advance lock: a runner pass that holds it ends within seconds (it is renewed
    while a pass runs, and lapses 30 s after a runner died holding it)."""
    from workers.studies.runner import Runner

    deadline = time.monotonic() + 2 * Runner.lock_ttl_s + 5
    while not ledger.try_lock(name, owner, now_s=time.time(), ttl_s=Runner.lock_ttl_s):
        if time.monotonic() > deadline:
            raise CbsError(f"study {name!r}: a runner has been advancing it for over a minute, so it was not "
                           "deleted; try again")
        time.sleep(2.0)


def _release_lock(ledger: Ledger, name: str, owner: str) -> None:
    from workers.studies.runner import Runner

    try:
        ledger.try_lock(name, owner, now_s=time.time(), ttl_s=Runner.lock_ttl_s)  # clears a pass asked for meanwhile
        ledger.unlock(name, owner)
    except Exception as exc:  # noqa: BLE001 - the ledger is away: the lock lapses at its TTL
        _log.warning(f"cbs study delete: releasing the lock of {name} failed ({type(exc).__name__}: {exc})")


def _delete_locked(tracker: Tracker, ledger: Ledger, s: WorkerSettings, name: str, exp, *, force: bool,
                   wait_s: float | None) -> DeletionReport:
    exp_id = exp.experiment_id
    resumed = bool(exp.tags.get(DELETED_NAME_TAG))
    cancelled = 0
    in_flight = _in_flight(tracker, ledger, name, exp_id)
    if in_flight:
        if not force:
            raise StudyInFlight(name, in_flight)
        from workers.studies.runner import Runner

        runner = Runner(s)
        cancelled = runner.cancel_study(name)
        _wait_stopped(runner.repairs, tracker, ledger, name, exp_id, 3 * s.stale_after_s if wait_s is None else wait_s,
                      period_s=min(1.0, s.heartbeat_s))
    dependants = _dependants(tracker, name, exp_id)
    all_runs = _runs(tracker, exp_id, deleted_too=True)
    trial_ids = set(ledger.leases(name)) | {r.data.tags["trial_id"] for r in all_runs if r.data.tags.get("trial_id")}

    _mark(tracker, exp, name)
    checkpoints = _remove_checkpoints(name, trial_ids)
    from workers.studies.local_study import delete_study_artifacts

    artifacts = delete_study_artifacts(name)
    _remove_caches(tracker, exp, all_runs)
    optuna_studies = _delete_optuna(s.optuna_storage, name)
    leases = ledger.forget_study(name)
    runs = _delete_runs(tracker, exp_id)
    deleted_as = f"{name}.deleted-{exp_id}"  # a study name holds no '.': never another study's
    tracker.client.rename_experiment(exp_id, deleted_as)
    tracker.client.delete_experiment(exp_id)
    return DeletionReport(study=name, experiment_id=exp_id, deleted_as=deleted_as, cancelled=cancelled,
                          runs_deleted=runs, leases_deleted=leases, checkpoints_removed=checkpoints,
                          artifacts_removed=artifacts, optuna_studies_deleted=optuna_studies, dependants=dependants,
                          resumed=resumed)


def _wait_stopped(repairs: Repairs, tracker: Tracker, ledger: Ledger, name: str, exp_id: str, wait_s: float, *,
                  period_s: float) -> None:
    """Wait until nothing of the cancelled study ``name`` is queued or running; a holder lost
    meanwhile is ended by ``repairs`` (as ``cbs study watch`` does)."""
    deadline = time.monotonic() + wait_s
    while True:
        repairs.ended(name)
        left = _in_flight(tracker, ledger, name, exp_id)
        if not left:
            return
        if time.monotonic() > deadline:
            raise CbsError(f"study {name!r} is cancelled, but {len(left)} trial(s) were still running after "
                           f"{wait_s:g} s ({', '.join(left[:3])}{', ...' if len(left) > 3 else ''}), so nothing "
                           "was deleted; delete it again once they have stopped")
        time.sleep(period_s)


def _mark(tracker: Tracker, exp, name: str) -> None:
    """Step 1: hidden from the studies list, the runner and trial reuse; findable by a second delete."""
    client = tracker.client
    client.set_experiment_tag(exp.experiment_id, DELETED_NAME_TAG, name)
    client.set_experiment_tag(exp.experiment_id, STUDY_TAG, "deleting")
    parent = _parent(tracker, exp)
    if parent is not None and parent.info.lifecycle_stage == "active":
        client.set_tag(parent.info.run_id, "status", "deleting")


def _remove_checkpoints(name: str, trial_ids) -> int:
    """Step 2: every checkpoint folder of the study's trials (a trial id is ``{study}.…``, and a
    study name holds no '.', so ``{study}.*`` is this study's alone)."""
    root = paths.checkpoint_root()
    if not root.is_dir():
        return 0
    folders = {p for p in root.glob(f"{name}.*") if p.is_dir()}
    folders |= {root / tid for tid in trial_ids if tid.startswith(f"{name}.") and (root / tid).is_dir()}
    for folder in folders:
        shutil.rmtree(folder)
    return len(folders)


def _remove_caches(tracker: Tracker, exp, runs) -> None:
    """Step 2: this host's read caches of the study's runs (``workers.tracking``)."""
    parent_id = exp.tags.get("cbs.parent_run_id")
    with Tracker._ENDED_LOCK:
        Tracker._ENDED.pop((tracker.uri, parent_id), None)
    files = [tracker._cache_path("mlflow-history", r.info.run_id) for r in runs]
    if parent_id:
        files.append(tracker._cache_path("mlflow-runs", parent_id))
    for path in files:
        path.unlink(missing_ok=True)


def _delete_optuna(url: str, name: str) -> int:
    """Step 3: the study's Optuna studies (``{study}/{cell}``); none without an Optuna store."""
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        return 0
    import optuna

    from workers.studies.search import storage

    store = storage(url)
    names = [n for n in optuna.get_all_study_names(storage=store) if n.startswith(f"{name}/")]
    for n in names:
        optuna.delete_study(study_name=n, storage=store)
    return len(names)


def _delete_runs(tracker: Tracker, exp_id: str) -> int:
    """Step 5: soft-delete the experiment's runs, trial runs first, the parent last."""
    runs = sorted(_runs(tracker, exp_id), key=lambda r: r.data.tags.get("role") == "study")
    for run in runs:
        tracker.client.delete_run(run.info.run_id)
    return len(runs)

"""MLflow: the record of every study and trial. The only module in CBS Lab that imports ``mlflow``.

Layout (DESIGN.md §2). One experiment per study, named after it (experiment tag
``cbs.study=1``). A parent run holds the spec (params for its scalar fields, the JSON in the tag
``cbs.spec`` and ``spec.yaml`` as an artifact) and the study's ``status`` tag. A child run per
trial, linked by ``mlflow.parentRunId``:

* params: the trial's ``TrainConfig`` flattened (``data.source``, ...);
* tags: ``study``, ``setting``, ``cell``, ``model``, ``batch_size``, ``lr``, ``seed``, ``role``
  (``reference``/``trial``), ``trial_id``, ``attempt``, ``status`` (``queued``, ``running``, then
  the outcome), ``outcome``, ``max_steps``, ``target_loss``, ``resumed_from_step``, ``trial_spec``
  (the TrialSpec JSON), ``worker``;
* metrics at ``step=`` optimizer step: ``train/loss``, ``optim/lr``, ``optim/grad_norm``,
  ``perf/tokens_per_s``, ``perf/mfu``, ``eval/loss_ewa`` (best τ), ``eval/loss_ewa_<τ>``,
  ``eval/loss_raw``, ``gns/g2``, ``gns/trace_sigma``, ``gns/b_simple`` (the gradient noise scale
  at log steps, so at every evaluation step too, ``cbscore.gns``; B_simple in sequences),
  ``heartbeat`` (wall time, Unix seconds), ``progress/step``, ``progress/tokens``, and the
  ``summary/*`` figures at the end (``steps_to_target``, ``tokens_to_target``, ...).

MLflow run status follows the trial: ``SCHEDULED`` while queued (again after a lost attempt),
``RUNNING`` while a worker holds it, then ``FINISHED`` (reached, censored, finished, diverged —
measurements), ``KILLED`` (pruned, stopped) or ``FAILED`` (failed). One run per trial, reused across
attempts (the ``attempt`` tag counts them).

Reads are cheap: one ``search_runs`` per study (latest metric values come with it) and metric
histories only where needed. Runs that have ended never change, so they and their histories are
cached, in memory and on disk under ``$CBS_HOME/cache`` (a restarted web app asks MLflow only for
what changed since this host last read it).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterable, Mapping, MutableMapping

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

from mlflow import MlflowClient  # noqa: E402
from mlflow.entities import Metric, Param, RunTag, ViewType  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402

from cbscore.callbacks import Callback, TrainState  # noqa: E402
from cbscore.errors import CbsError, ConfigError  # noqa: E402
from cbscore.trial_result import EvalPoint, TrialResult  # noqa: E402

#: MLflow run status of each trial status.
RUN_STATUS = {
    "queued": "SCHEDULED", "lost": "SCHEDULED", "running": "RUNNING",
    "reached": "FINISHED", "censored": "FINISHED", "finished": "FINISHED", "diverged": "FINISHED",
    "pruned": "KILLED", "stopped": "KILLED", "failed": "FAILED",
}
TERMINAL_RUN_STATUSES = ("FINISHED", "KILLED", "FAILED")

#: Metric keys that make up a trial's curves (``trial_curve``).
CURVE_PREFIXES = ("train/", "eval/", "optim/", "perf/", "gns/")

#: Metrics-dict keys of the gradient noise scale (``cbscore.gns.GnsProbe.metrics``) → MLflow keys.
GNS_METRICS = {"gns_g2": "gns/g2", "gns_trace_sigma": "gns/trace_sigma", "gns_b_simple": "gns/b_simple"}

_SPEC_TAG = "cbs.spec"
_MAX_TAG = 7900  # MLflow's limit is 8000 characters per tag value


class TrackingError(CbsError):
    """The tracking store cannot be reached or refuses a write; the message says which store."""


#: MLflow error codes of a store that is down, overloaded or restarting (worth trying again).
_TRANSIENT_CODES = frozenset({"TEMPORARILY_UNAVAILABLE", "INTERNAL_ERROR", "REQUEST_LIMIT_EXCEEDED",
                              "DEADLINE_EXCEEDED", "ABORTED", "RESOURCE_EXHAUSTED"})
_TRANSIENT_WORDS = ("max retries exceeded", "connection refused", "connection reset", "database is locked",
                    "server closed the connection", "could not connect", "timed out", "temporarily unavailable")


#: OSError numbers of a machine that ran out of something (disk, quota, file handles, memory for
#: the kernel): an outage of the host, not the trial's fault.
RESOURCE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.ENFILE, errno.EMFILE, errno.ENOMEM})


def is_out_of_resources(exc: BaseException | None) -> bool:
    """True when ``exc`` (or what caused it) is an OSError of :data:`RESOURCE_ERRNOS`: a disk
    that is full (a checkpoint or store write), a quota, no file handles left."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` (or what caused it) says a store is unreachable or busy, not that the
    request was wrong: a connection error, a database that is locked or went away, an MLflow
    server answering 5xx, a broker that cannot be reached (kombu's ``OperationalError``, Redis's
    connection errors), a disk that is full (:func:`is_out_of_resources`). A trial that meets
    one gives its attempt back instead of failing."""
    import sqlalchemy.exc as sa_exc
    from kombu.exceptions import OperationalError as BrokerUnreachable

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (ConnectionError, TimeoutError, sa_exc.OperationalError, sa_exc.InterfaceError,
                            sa_exc.DisconnectionError, sqlite3.OperationalError)):
            return True
        if isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS:
            return True
        if type(exc).__module__.startswith(("requests", "urllib3")) or isinstance(exc, BrokerUnreachable):
            return True
        if type(exc).__module__ == "redis.exceptions" and type(exc).__name__ in ("ConnectionError", "TimeoutError",
                                                                                  "BusyLoadingError"):
            return True
        if isinstance(exc, MlflowException):
            if exc.error_code in _TRANSIENT_CODES:
                return True
            if any(w in str(exc).lower() for w in _TRANSIENT_WORDS):
                return True
        exc = exc.__cause__ or exc.__context__
    return False


def retrying(call, *, what: str, attempts: int | None = None, first_wait_s: float = 0.5):
    """``call()``, tried up to ``attempts`` times (``CBS_TRACKING_RETRIES``, default 4) with
    doubling waits while it fails with a transient error (:func:`is_transient`)."""
    n = attempts or int(os.environ.get("CBS_TRACKING_RETRIES") or 4)
    wait = first_wait_s
    for i in range(n):
        try:
            return call()
        except Exception as exc:
            if i == n - 1 or not is_transient(exc):
                raise
            print(f"cbs tracking: {what} failed ({type(exc).__name__}: {str(exc)[:200]}); "
                  f"retrying in {wait:g} s", flush=True)
            time.sleep(wait)
            wait *= 2


def wait_out(call, *, what: str, log=None, first_wait_s: float = 1.0, max_wait_s: float = 30.0,
             give_up_s: float | None = None):
    """``call()``, tried again with doubling waits (up to ``max_wait_s``) while it fails with a
    transient error, for up to ``give_up_s`` seconds in all (``CBS_OUTAGE_WAIT_S``, default 600):
    how a process starts, or a pass begins, through a database or broker outage (a restart takes
    30–40 s) instead of crash-looping."""
    log = log or (lambda message: print(message, flush=True))
    limit = give_up_s if give_up_s is not None else float(os.environ.get("CBS_OUTAGE_WAIT_S") or 600.0)
    deadline = time.monotonic() + limit
    wait = first_wait_s
    while True:
        try:
            return call()
        except Exception as exc:
            if not is_transient(exc) or time.monotonic() + wait > deadline:
                raise
            log(f"cbs: {what}: a store is unreachable ({type(exc).__name__}: {str(exc)[:200]}); "
                f"trying again in {wait:g} s")
            time.sleep(wait)
            wait = min(max_wait_s, 2 * wait)


# ---------------------------------------------------------------------------- store and client
_CLIENTS: dict[tuple[int, str], MlflowClient] = {}
_CLIENTS_LOCK = threading.Lock()


def _sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def prepare_store(uri: str) -> None:
    """Create a local SQLite store in WAL mode (readers never wait on a writer), once.

    The first open of an MLflow database runs its migrations; a file lock keeps two processes
    starting at the same moment from running them at once.
    """
    path = _sqlite_path(uri)
    if path is None:
        if uri.startswith(("postgresql", "postgres", "mysql")):
            from workers.schema_lock import schema_lock

            with schema_lock(uri, "mlflow"):  # the first client creates the schema, alone
                MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".mlflow-init.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            con = sqlite3.connect(path, timeout=30)
            try:
                con.execute("PRAGMA journal_mode=WAL")
            finally:
                con.close()
            MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def load_service_password(env: MutableMapping[str, str] | None = None) -> None:
    """``CBS_TRACKING_PASSWORD_FILE``: the lab's MLflow service account password read from a file
    (keep it mode 0600) into ``MLFLOW_TRACKING_PASSWORD``, which MLflow's client sends, unless that
    is set already (``cbs tracking --auth``; docs/SECURITY.md)."""
    env = os.environ if env is None else env
    path = env.get("CBS_TRACKING_PASSWORD_FILE")
    if path and not env.get("MLFLOW_TRACKING_PASSWORD"):
        env["MLFLOW_TRACKING_PASSWORD"] = Path(path).expanduser().read_text().strip()


def client(uri: str) -> MlflowClient:
    """One client per (process, URI); a local store is prepared on first use."""
    load_service_password()
    key = (os.getpid(), uri)
    with _CLIENTS_LOCK:
        found = _CLIENTS.get(key)
        if found is None:
            try:
                prepare_store(uri)
            except MlflowException as exc:
                raise TrackingError(f"MLflow store {uri!r} cannot be opened: {exc.message}") from None
            found = _CLIENTS[key] = MlflowClient(tracking_uri=uri)
        return found


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config → flat MLflow params: ``{"data": {"source": "x"}}`` → ``{"data.source": "x"}``."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        else:
            text = json.dumps(value) if isinstance(value, (list, tuple, bool)) or value is None else str(value)
            out[name] = text[:6000]
    return out


def _ms(now_s: float | None = None) -> int:
    return int((time.time() if now_s is None else now_s) * 1000)


# ---------------------------------------------------------------------------- the tracker
class Tracker:
    """Studies and trials in one MLflow tracking store."""

    def __init__(self, tracking_uri: str, artifact_root: str | None = None):
        self.uri = tracking_uri
        self.artifact_root = artifact_root
        self.client = client(tracking_uri)

    # -------------------------------------------------------------- studies
    def experiment(self, study: str):
        """The study's experiment, or None (deleted experiments are reported as an error)."""
        exp = self.client.get_experiment_by_name(study)
        if exp is not None and exp.lifecycle_stage == "deleted":
            raise ConfigError("name", study, "names a deleted MLflow experiment; restore or purge it, or pick another name")
        return exp

    def create_study(self, study: str, *, spec_dict: Mapping[str, Any], spec_yaml: str,
                     params: Mapping[str, Any], tags: Mapping[str, str]) -> tuple[str, str]:
        """Experiment + parent run holding the spec; returns ``(experiment_id, parent_run_id)``."""
        location = None if self.artifact_root is None else f"{self.artifact_root.rstrip('/')}/{study}"
        exp_id = self.client.create_experiment(study, artifact_location=location,
                                               tags={"cbs.study": "1", "cbs.kind": str(spec_dict.get("kind", ""))})
        spec_json = json.dumps(dict(spec_dict), sort_keys=True)
        run_tags = {"role": "study", "study": study, "status": "running", **tags,
                    "mlflow.runName": study}
        if len(spec_json) <= _MAX_TAG:
            run_tags[_SPEC_TAG] = spec_json
        run = self.client.create_run(exp_id, tags=run_tags, run_name=study)
        run_id = run.info.run_id
        self.client.log_batch(run_id, params=[Param(k, v) for k, v in flatten(params).items()])
        self.client.log_text(run_id, spec_yaml, "spec.yaml")
        self.client.set_experiment_tag(exp_id, "cbs.parent_run_id", run_id)
        return exp_id, run_id

    def study_run(self, study: str):
        """The study's parent run, or None."""
        exp = self.experiment(study)
        if exp is None:
            return None
        run_id = exp.tags.get("cbs.parent_run_id")
        if run_id:
            return self.client.get_run(run_id)
        runs = self.client.search_runs([exp.experiment_id], "tags.role = 'study'", max_results=1)
        return runs[0] if runs else None

    def study_spec(self, parent_run) -> dict:
        """The spec dict stored with a study's parent run."""
        text = parent_run.data.tags.get(_SPEC_TAG)
        if text:
            return json.loads(text)
        path = self.client.download_artifacts(parent_run.info.run_id, "spec.yaml")
        import yaml

        return yaml.safe_load(Path(path).read_text())

    def studies(self) -> list:
        """``[(experiment, parent run or None)]`` of every CBS study, newest first."""
        out, token = [], None
        while True:
            page = self.client.search_experiments(filter_string="tags.`cbs.study` = '1'", max_results=1000,
                                                  order_by=["creation_time DESC"], page_token=token)
            out.extend(page)
            token = page.token
            if not token:
                break
        runs = []
        for exp in out:
            run_id = exp.tags.get("cbs.parent_run_id")
            try:
                runs.append((exp, self.client.get_run(run_id) if run_id else None))
            except MlflowException:
                runs.append((exp, None))
        return runs

    def update_study_spec(self, parent_run, *, spec_dict: Mapping[str, Any], spec_yaml: str, author: str,
                          changes: list[str], now_s: float) -> int:
        """Store a new version of a study's spec (``cbs study extend``); returns its number.

        The parent run's spec tag and ``spec.yaml`` become the new version; every version is kept as
        ``spec-history/v{n}.yaml`` with its time, author and changes, and listed in the ``spec_history``
        tag (newest last; the oldest entries drop out past MLflow's tag length, the files stay)."""
        run_id = parent_run.info.run_id
        tags = parent_run.data.tags
        version = int(tags.get("spec_version") or 1)
        history = json.loads(tags.get("spec_history") or "[]")
        if version == 1 and not history:  # the launch's version, kept before the first extension
            history.append({"version": 1, "time_s": parent_run.info.start_time / 1000.0,
                            "author": tags.get("owner", ""), "changes": ["launched"]})
            import yaml

            self.client.log_text(run_id, yaml.safe_dump(self.study_spec(parent_run), sort_keys=False),
                                 "spec-history/v1.yaml")
        version += 1
        entry = {"version": version, "time_s": round(now_s, 3), "author": author, "changes": list(changes)}
        history.append(entry)
        header = "".join(f"# {line}\n" for line in [f"version {version}, by {author or 'unknown'} at {now_s:.0f} "
                                                     "(Unix time)", *changes])
        self.client.log_text(run_id, header + spec_yaml, f"spec-history/v{version}.yaml")
        self.client.log_text(run_id, spec_yaml, "spec.yaml")
        spec_json = json.dumps(dict(spec_dict), sort_keys=True)
        listed = json.dumps(history)
        while len(listed) > _MAX_TAG and len(history) > 1:
            history.pop(0)
            listed = json.dumps(history)
        new_tags = {"spec_version": str(version), "spec_history": listed}
        if len(spec_json) <= _MAX_TAG:
            new_tags[_SPEC_TAG] = spec_json
        elif _SPEC_TAG in tags:  # too long for a tag: spec.yaml holds it, and a stale tag must not win
            self.client.delete_tag(run_id, _SPEC_TAG)
        self.set_tags(run_id, new_tags)
        return version

    def reopen_study(self, parent_run_id: str) -> None:
        """A done study that was extended runs again: status ``running``, the parent run RUNNING."""
        self.client.set_tag(parent_run_id, "status", "running")
        self.client.update_run(parent_run_id, status="RUNNING")

    def set_study_status(self, parent_run_id: str, status: str, *, end: str | None = None) -> None:
        """Tag the study ``status`` (``running``, ``done``, ``cancelled``); end the parent run if asked."""
        self.client.set_tag(parent_run_id, "status", status)
        if end is not None:
            self.client.set_terminated(parent_run_id, status=end)

    # -------------------------------------------------------------- trials
    def create_trial(self, experiment_id: str, parent_run_id: str, *, trial_id: str, tags: Mapping[str, str],
                     params: Mapping[str, Any]) -> str:
        """A child run for one trial, ``SCHEDULED``; returns its run id."""
        run = self.client.create_run(experiment_id, run_name=trial_id, tags={
            "mlflow.parentRunId": parent_run_id, "trial_id": trial_id, "status": "queued", "attempt": "1", **tags})
        run_id = run.info.run_id
        flat = list(flatten(params).items())
        for i in range(0, len(flat), 100):
            self.client.log_batch(run_id, params=[Param(k, v) for k, v in flat[i:i + 100]])
        self.client.update_run(run_id, status="SCHEDULED")
        return run_id

    def find_trial(self, experiment_id: str, trial_id: str):
        """The run of ``trial_id`` (None if none was created)."""
        runs = self.client.search_runs([experiment_id], f"tags.trial_id = '{trial_id}'", max_results=2)
        return runs[0] if runs else None

    def _search(self, experiment_id: str, flt: str) -> list:
        out, token = [], None
        while True:
            page = self.client.search_runs([experiment_id], flt, run_view_type=ViewType.ACTIVE_ONLY,
                                           max_results=1000, page_token=token)
            out.extend(page)
            token = page.token
            if not token:
                return out

    #: Ended trial runs per (store, parent run), and when they were last fetched (Unix ms).
    _ENDED: "dict[tuple[str, str], tuple[dict[str, Any], int]]" = {}
    _ENDED_LOCK = threading.Lock()
    #: A run that ended up to this long before the last fetch is fetched again (clock skew).
    ENDED_SLACK_MS = 30_000

    def trial_runs(self, experiment_id: str, parent_run_id: str) -> list:
        """Every trial run of a study. The first call reads them all; later calls read only the
        runs still scheduled or running and those ended since (an ended run never changes), so a
        page refresh costs what is active, not the whole study. The ended runs are also kept on
        disk (:meth:`_load_ended`), so a new process (the web app after a restart) starts from
        them too."""
        base = f"tags.`mlflow.parentRunId` = '{parent_run_id}'"
        key = (self.uri, parent_run_id)
        now_ms = _ms()
        with Tracker._ENDED_LOCK:
            if key not in Tracker._ENDED:
                loaded = self._load_ended(parent_run_id)
                if loaded is not None:
                    Tracker._ENDED[key] = loaded
            ended, since_ms = Tracker._ENDED.get(key, ({}, None))
            ended = dict(ended)
        n_before = len(ended)
        if since_ms is None:
            fresh = self._search(experiment_id, base)
        else:
            fresh = (self._search(experiment_id, f"{base} and attributes.status = 'RUNNING'")
                     + self._search(experiment_id, f"{base} and attributes.status = 'SCHEDULED'")
                     + self._search(experiment_id, f"{base} and attributes.end_time >= {since_ms - self.ENDED_SLACK_MS}"))
        active = {}
        for run in fresh:
            if run.info.status in TERMINAL_RUN_STATUSES:
                ended[run.info.run_id] = run
            else:
                active[run.info.run_id] = run
        for run_id in active:
            ended.pop(run_id, None)
        with Tracker._ENDED_LOCK:
            Tracker._ENDED[key] = (ended, now_ms)
        if since_ms is None or len(ended) != n_before:  # new ended runs (the rest is refetched anyway)
            self._save_ended(parent_run_id, ended, now_ms)
        return list(ended.values()) + list(active.values())

    def _cache_path(self, kind: str, name: str) -> Path:
        """``$CBS_HOME/cache/<kind>/<store>-<name>.pickle`` (one namespace per tracking store)."""
        import hashlib

        from cbscore import paths

        folder = paths.subdir("cache") / kind
        folder.mkdir(exist_ok=True)
        return folder / f"{hashlib.sha1(self.uri.encode()).hexdigest()[:12]}-{name}.pickle"

    def _load_ended(self, parent_run_id: str) -> "tuple[dict[str, Any], int] | None":
        """The ended runs of a study as this host last read them, and when (or ``None``)."""
        saved = _disk_load(self._cache_path("mlflow-runs", parent_run_id))
        return None if saved is None else (dict(saved["runs"]), int(saved["since_ms"]))

    def _save_ended(self, parent_run_id: str, ended: Mapping[str, Any], since_ms: int) -> None:
        _disk_save(self._cache_path("mlflow-runs", parent_run_id), {"since_ms": since_ms, "runs": dict(ended)})

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        """Set several tags of a run in one call."""
        self.client.log_batch(run_id, tags=[RunTag(k, "" if v is None else str(v)) for k, v in tags.items()])

    def log_text(self, run_id: str, text: str, path: str) -> None:
        self.client.log_text(run_id, text, path)

    def get_run(self, run_id: str):
        return self.client.get_run(run_id)

    def set_trial_status(self, run_id: str, status: str, **tags: Any) -> None:
        """Tag the trial's ``status`` (and more tags) and move the MLflow run status to match."""
        all_tags = {"status": status, **{k: "" if v is None else str(v) for k, v in tags.items()}}
        run_status = RUN_STATUS[status]

        def write() -> None:  # idempotent, so a retry after a write that landed is harmless
            self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in all_tags.items()])
            if run_status in TERMINAL_RUN_STATUSES:
                self.client.set_terminated(run_id, status=run_status)
            else:
                self.client.update_run(run_id, status=run_status)

        retrying(write, what=f"setting the status of run {run_id}")

    def end_trial(self, run_id: str, outcome: str, **tags: Any) -> None:
        """End a trial run with ``outcome`` (tags ``status`` and ``outcome``; FINISHED/KILLED/FAILED)."""
        self.set_trial_status(run_id, outcome, outcome=outcome, **tags)

    def log_metrics(self, run_id: str, metrics: Iterable[Metric]) -> None:
        """Log ``metrics`` in batches of 1000, each retried on a transient error (:func:`retrying`).
        A batch logged twice (a retry after a write that did land) is harmless: the history keeps
        the latest value per step."""
        batch = list(metrics)
        for i in range(0, len(batch), 1000):
            chunk = batch[i:i + 1000]
            retrying(lambda: self.client.log_batch(run_id, metrics=chunk), what=f"logging metrics of run {run_id}")

    # -------------------------------------------------------------- histories (cached when ended)
    _HISTORY: "OrderedDict[tuple[str, str, str], tuple[tuple[float, ...], tuple[float, ...]]]" = OrderedDict()
    #: Bytes the in-memory history cache may hold (``CBS_HISTORY_CACHE_MB``, default 256): a curve
    #: of n points costs about 64·n bytes (two tuples of float objects), so the cap is in bytes,
    #: not entries (20,000 curves of 100k points would be 128 GB).
    _HISTORY_MAX_BYTES = int(float(os.environ.get("CBS_HISTORY_CACHE_MB") or 256) * 2**20)
    _HISTORY_BYTES = 0

    @staticmethod
    def _remember(cache_key, curve) -> None:
        """Keep ``curve`` in the in-memory cache, dropping the least recently used beyond the cap."""
        if cache_key in Tracker._HISTORY:
            Tracker._HISTORY_BYTES -= _curve_bytes(Tracker._HISTORY.pop(cache_key))
        Tracker._HISTORY[cache_key] = curve
        Tracker._HISTORY_BYTES += _curve_bytes(curve)
        while Tracker._HISTORY_BYTES > Tracker._HISTORY_MAX_BYTES and len(Tracker._HISTORY) > 1:
            _, old = Tracker._HISTORY.popitem(last=False)
            Tracker._HISTORY_BYTES -= _curve_bytes(old)

    def history(self, run, key: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """``(steps, values)`` of one metric, one value per step (the latest write wins: a resumed
        attempt may log a step again). Cached for ended runs."""
        run_id = run.info.run_id
        ended = run.info.status in TERMINAL_RUN_STATUSES
        cache_key = (self.uri, run_id, key)
        if ended and cache_key in Tracker._HISTORY:
            Tracker._HISTORY.move_to_end(cache_key)
            return Tracker._HISTORY[cache_key]
        on_disk: dict = {}
        if ended:  # read by an earlier process on this host?
            on_disk = (_disk_load(self._cache_path("mlflow-history", run_id)) or {}).get("curves", {})
            if key in on_disk:
                Tracker._remember(cache_key, on_disk[key])
                return on_disk[key]
        points: dict[int, tuple[int, float]] = {}
        for m in self.client.get_metric_history(run_id, key):
            if m.step not in points or m.timestamp >= points[m.step][0]:
                points[m.step] = (m.timestamp, m.value)
        steps = tuple(float(s) for s in sorted(points))
        values = tuple(points[int(s)][1] for s in steps)
        if ended:
            Tracker._remember(cache_key, (steps, values))
            _disk_save(self._cache_path("mlflow-history", run_id), {"curves": {**on_disk, key: (steps, values)}})
        return steps, values

    def curves(self, run_id: str) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
        """Every curve metric of a run: ``{key: (steps, values)}``."""
        run = self.client.get_run(run_id)
        keys = sorted(k for k in run.data.metrics if k.startswith(CURVE_PREFIXES))
        return {k: self.history(run, k) for k in keys}


# ---------------------------------------------------------------------------- on-disk caches
#: Version of the on-disk caches (a new one ignores older files).
_DISK_FORMAT = 1
#: Bytes the on-disk caches under ``$CBS_HOME/cache`` may hold (``CBS_DISK_CACHE_MB``, default
#: 512); the least recently used files go first (a read touches its file).
_DISK_MAX_BYTES = int(float(os.environ.get("CBS_DISK_CACHE_MB") or 512) * 2**20)
#: Saves between two prunes in one process (the first save prunes too).
_PRUNE_EVERY = 50
_saves = 0


def _curve_bytes(curve) -> int:
    steps, values = curve
    return 64 * (len(steps) + len(values)) // 2 + 200


def prune_disk_cache(root: Path, max_bytes: int) -> int:
    """Delete the least recently used cache files under ``root`` until they hold at most
    ``max_bytes``; returns the bytes freed. Another process may delete the same file: fine."""
    files = []
    for path in root.rglob("*.pickle"):
        try:
            st = path.stat()
        except OSError:
            continue
        files.append((st.st_mtime, st.st_size, path))
    total = sum(size for _, size, _ in files)
    freed = 0
    for _, size, path in sorted(files):
        if total - freed <= max_bytes:
            break
        try:
            path.unlink()
            freed += size
        except OSError:
            pass
    return freed


def _disk_load(path: Path) -> dict | None:
    """A cache file written by :func:`_disk_save`; ``None`` when missing, from another MLflow
    version or unreadable (it is only a cache: a miss costs a read from MLflow, never an answer)."""
    import pickle

    import mlflow

    try:
        with path.open("rb") as f:
            saved = pickle.load(f)  # our own file under the state directory
        if saved.get("format") != _DISK_FORMAT or saved.get("mlflow") != mlflow.__version__:
            return None
        os.utime(path)  # recently used: the pruning keeps it
        return saved
    except Exception:  # missing or broken: a miss
        return None


def _disk_save(path: Path, payload: Mapping[str, Any]) -> None:
    """Write ``payload`` atomically (a temporary file renamed over the old one), so processes that
    read and write the same cache never see half a file. Failures are ignored (a cache)."""
    import pickle
    import tempfile

    import mlflow

    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump({"format": _DISK_FORMAT, "mlflow": mlflow.__version__, **payload}, f,
                        protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except Exception:  # a read-only or full disk costs speed, never a read
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        return
    global _saves
    _saves += 1
    if _saves % _PRUNE_EVERY == 1:
        prune_disk_cache(path.parent.parent, _DISK_MAX_BYTES)


# ---------------------------------------------------------------------------- the callback
def metric(key: str, value: float, step: int, now_s: float | None = None) -> Metric:
    return Metric(key=key, value=float(value), timestamp=_ms(now_s), step=int(step))


def eval_metrics(point: EvalPoint, now_s: float | None = None) -> list[Metric]:
    """The metrics of one evaluation: best-τ, raw and per-τ averaged-weights losses."""
    out = [metric("eval/loss_ewa", point.loss, point.step, now_s),
           metric("eval/loss_raw", point.raw_loss, point.step, now_s)]
    out += [metric(f"eval/loss_ewa_{tau}", loss, point.step, now_s) for tau, loss in point.ewa_losses.items()]
    return out


def result_tags(result: TrialResult) -> dict[str, str]:
    """The tags an ended trial's run carries from its result (the steps table reads ``beta2`` and
    ``target_tau``): set by the holder, and restored by the runner's repair from the checkpoint."""
    return {"stop_reason": result.stop_reason or "",
            "steps_to_target": "" if result.steps_to_target is None else repr(result.steps_to_target),
            "beta2": repr(result.beta2), "ewa_taus": json.dumps(list(result.ewa_taus)),
            "target_tau": result.target_tau or ""}


def summary_metrics(result: TrialResult, now_s: float | None = None) -> list[Metric]:
    """End-of-trial figures at the trial's last step (only those that are known)."""
    figures = {
        "summary/steps_to_target": result.steps_to_target,
        "summary/tokens_to_target": result.tokens_to_target,
        "summary/final_eval_loss": result.final_eval_loss,
        "summary/best_eval_loss": result.best_eval_loss,
        "summary/final_raw_loss": result.final_raw_loss,
        "summary/steps": result.steps,
        "summary/tokens": result.tokens,
        "summary/total_steps": result.total_steps,
        "summary/tokens_per_s": result.tokens_per_s,
        "summary/mfu": result.mfu,
        "summary/train_seconds": result.train_seconds,
        "summary/eval_seconds": result.eval_seconds,
        "summary/peak_memory_bytes": result.peak_memory_bytes,
        "progress/tokens": result.tokens,
        "progress/step": result.steps,
    }
    return [metric(k, v, result.steps, now_s) for k, v in figures.items() if v is not None]


class MlflowCallback(Callback):
    """Buffers a trial's metrics and sends them with one ``log_batch`` per flush.

    A flush happens every ``flush_s`` seconds (it carries the ``heartbeat`` metric: wall time at
    the trial's step), on every evaluation when ``flush_on_eval`` is set, and at the end. The
    callback does not end the run: the runner knows the outcome (``pruned`` vs ``stopped``).
    """

    def __init__(self, tracker: Tracker, run_id: str, *, flush_s: float = 5.0, flush_on_eval: bool = False):
        self.tracker = tracker
        self.run_id = run_id
        self.flush_s = flush_s
        self.flush_on_eval = flush_on_eval
        self.buffer: list[Metric] = []
        self.last_flush = 0.0
        self.flushes = 0
        #: The last step whose training-curve points are in the store or the buffer, and the last
        #: evaluated step likewise: a resumed trial recomputes the steps between its checkpoint
        #: and the crash, and each step is logged once.
        self.logged_through = -1
        self.evals_through = -1

    #: Metrics kept while the store is unreachable; beyond this the oldest training-curve points
    #: go first (evaluations and summaries are what the study reads, so they are kept).
    max_buffer = 200_000

    def flush(self, state: TrainState, *, must: bool = False) -> None:
        """Send the buffer. A failure mid-training keeps the buffer for the next flush and goes on
        (the store may be restarting); with ``must`` (the end of the trial) it raises, and the
        trial gives its attempt back (:mod:`workers.trial`)."""
        now = time.time()
        self.buffer += [metric("heartbeat", now, state.step, now), metric("progress/step", state.step, state.step, now),
                        metric("progress/tokens", state.tokens, state.step, now)]
        batch, self.buffer = self.buffer, []
        self.last_flush = now
        try:
            self.tracker.log_metrics(self.run_id, batch)
        except Exception as exc:
            self.buffer = batch + self.buffer
            self._trim()
            if must or not is_transient(exc):
                raise
            print(f"cbs trial: metrics kept for the next flush ({len(self.buffer)} waiting): {exc}", flush=True)
            return
        self.flushes += 1

    def _trim(self) -> None:
        excess = len(self.buffer) - self.max_buffer
        if excess > 0:
            curve = [i for i, m in enumerate(self.buffer) if m.key.startswith(("train/", "optim/", "perf/", "heartbeat",
                                                                                "progress/"))]
            drop = set(curve[:excess])
            self.buffer = [m for i, m in enumerate(self.buffer) if i not in drop]

    def _logged_last(self, key: str) -> int:
        """The last step of ``key`` in the store (-1 when none)."""
        history = retrying(lambda: self.tracker.client.get_metric_history(self.run_id, key),
                           what=f"reading the history of {key}")
        return max((m.step for m in history), default=-1)

    def pre_train(self, state: TrainState) -> None:
        tags = [RunTag("total_steps", str(state.total_steps)), RunTag("warmup_steps", str(state.warmup_steps)),
                RunTag("device", state.device)]
        if state.resumed_from_step is not None:
            tags.append(RunTag("resumed_from_step", str(state.resumed_from_step)))
        # What an earlier attempt logged (also before the "already ended" path, which re-logs
        # from the checkpoint's result what the store lacks: see post_train).
        self.logged_through = self._logged_last("train/loss")
        self.evals_through = self._logged_last("eval/loss_ewa")
        # The checkpoint's own history first: whatever of it the store lacks.
        self._add_history(state.eval_history, ())
        retrying(lambda: self.tracker.client.log_batch(self.run_id, tags=tags), what="tagging the run")
        self.flush(state, must=True)

    def _add_history(self, evals, train_log) -> None:
        """Buffer the evaluations and train losses of a checkpoint or result past what is logged
        (the other training-curve keys of those steps are not kept in a checkpoint; the flush
        before every checkpoint sent them)."""
        for step, loss in train_log:
            if step > self.logged_through:
                self.buffer.append(metric("train/loss", loss, step))
                self.logged_through = step
        for point in evals:
            if point.step > self.evals_through:
                self.buffer += eval_metrics(point)
                self.evals_through = point.step

    def post_step(self, state: TrainState, metrics: dict[str, Any] | None) -> None:
        if metrics is not None and state.step > self.logged_through:
            step = self.logged_through = state.step
            self.buffer.append(metric("train/loss", metrics["train_loss"], step))
            self.buffer.append(metric("optim/lr", metrics["lr"], step))
            if metrics.get("grad_norm") is not None:
                self.buffer.append(metric("optim/grad_norm", metrics["grad_norm"], step))
            if metrics.get("tokens_per_s") is not None:
                self.buffer.append(metric("perf/tokens_per_s", metrics["tokens_per_s"], step))
            if metrics.get("tokens_per_s_per_device") is not None:
                self.buffer.append(metric("perf/tokens_per_s_per_device", metrics["tokens_per_s_per_device"], step))
            if metrics.get("mfu") is not None:
                self.buffer.append(metric("perf/mfu", metrics["mfu"], step))
            for key, name in GNS_METRICS.items():  # None where not finite
                if metrics.get(key) is not None:
                    self.buffer.append(metric(name, metrics[key], step))
        if time.time() - self.last_flush >= self.flush_s:
            self.flush(state)

    def post_eval(self, state: TrainState, point: EvalPoint) -> None:
        self._add_history((point,), ())
        if self.flush_on_eval:
            self.flush(state)

    def may_checkpoint(self, state: TrainState) -> bool:
        """History before checkpoint: send every metric up to this step first, and skip the
        checkpoint while the store cannot take them (a checkpoint never runs ahead of the
        history: an attempt that resumes from it recomputes nothing before it)."""
        self.flush(state)
        return not self.buffer

    def post_train(self, state: TrainState, result: TrialResult) -> None:
        # an attempt that found the trial ended (its result in the checkpoint) sends what the
        # store lacks of the result's histories (after a final flush that failed)
        self._add_history(result.eval_history, result.train_log)
        self.buffer += summary_metrics(result)
        self.flush(state, must=True)

    def on_error(self, state: TrainState, exc: BaseException) -> None:
        try:
            self.flush(state)
        except Exception as flush_exc:  # noqa: BLE001 - the training error is the one to report
            print(f"cbs trial: could not send the last metrics: {flush_exc}", flush=True)

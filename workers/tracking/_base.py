"""Constants of the MLflow layout, the errors the tracker tells apart (transient, out of resources) and its
retries, and the store and its clients."""

from __future__ import annotations

import errno
import fcntl
import functools
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

from mlflow.exceptions import MlflowException  # noqa: E402

from cbscore.errors import CbsError  # noqa: E402
from mlflow import MlflowClient  # noqa: E402

_log = logging.getLogger(__name__)

#: MLflow run status of each trial status.
RUN_STATUS = {
    "queued": "SCHEDULED", "lost": "SCHEDULED", "running": "RUNNING",
    "reached": "FINISHED", "censored": "FINISHED", "finished": "FINISHED", "diverged": "FINISHED",
    "pruned": "KILLED", "stopped": "KILLED", "failed": "FAILED",
}
TERMINAL_RUN_STATUSES = ("FINISHED", "KILLED", "FAILED")

#: Metric keys that make up a trial's curves (``trial_curve``).
CURVE_PREFIXES = ("train/", "eval/", "optim/", "perf/", "gns/")

#: Metrics-dict keys of the gradient noise scale (``cbscore.train.gns.GnsProbe.metrics``) → MLflow keys.
GNS_METRICS = {"gns_g2": "gns/g2", "gns_trace_sigma": "gns/trace_sigma", "gns_b_simple": "gns/b_simple"}

_SPEC_TAG = "cbs.spec"
#: Tag of an ended trial run that holds its whole ``eval/loss_ewa`` curve (``_callback.eval_curve_tag``).
EVAL_CURVE_TAG = "eval_curve"
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


def outage_wait_s() -> float:
    """``CBS_OUTAGE_WAIT_S`` (default 600): how long a process waits out an unreachable store
    (:func:`wait_out`), and so the longest a trial cut off from the ledger waits to give its
    attempt back."""
    return float(os.environ.get("CBS_OUTAGE_WAIT_S") or 600.0)


def wait_out(call, *, what: str, log=None, first_wait_s: float = 1.0, max_wait_s: float = 30.0,
             give_up_s: float | None = None):
    """``call()``, tried again with doubling waits (up to ``max_wait_s``) while it fails with a
    transient error, for up to ``give_up_s`` seconds in all (``CBS_OUTAGE_WAIT_S``, default 600):
    how a process starts, or a pass begins, through a database or broker outage (a restart takes
    30–40 s) instead of crash-looping."""
    log = log or _log.warning
    limit = give_up_s if give_up_s is not None else outage_wait_s()
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
            from workers.infra.schema_lock import schema_lock

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


#: Trainer-config fields a trial run always shows as MLflow params (what a researcher compares runs
#: by in MLflow's UI); the others only where they differ from the trainer's default.
CORE_TRIAL_PARAMS = ("model", "batch_size", "lr", "max_tokens", "max_steps", "context_tokens", "seed", "beta1",
                     "beta2", "ewa_taus", "warmup_tokens", "schedule", "weight_decay", "target_loss", "eval_windows",
                     "devices", "data.source", "data.vocab_size")


@functools.lru_cache(maxsize=1)
def _default_params() -> dict[str, str]:
    """The trainer's defaults, flattened as :func:`flatten` writes them (computed once)."""
    import dataclasses

    from cbscore.data import DataConfig
    from cbscore.train.branch_config import flat_dict
    from cbscore.train.config import TrainConfig

    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING}
    defaults["data"] = {f.name: f.default for f in dataclasses.fields(DataConfig)
                        if f.default is not dataclasses.MISSING}
    return flatten(flat_dict(defaults))


def trial_params(train_config: Mapping[str, Any]) -> dict[str, str]:
    """A trial run's MLflow params: :data:`CORE_TRIAL_PARAMS` and every other field of its
    ``TrainConfig.to_dict()`` that differs from the trainer's default, flattened (``data.source``).
    The whole config is the run's ``trial_spec`` tag. Fewer params per run is what a study's read
    costs most (MLflow loads every param of every run it returns; a page's first read). The branch
    fields go flat, by the names runs have always had (:func:`cbscore.train.branch_config.flat_dict`)."""
    from cbscore.train.branch_config import flat_dict

    flat, defaults = flatten(flat_dict(train_config)), _default_params()
    return {k: v for k, v in flat.items() if k in CORE_TRIAL_PARAMS or k not in defaults or defaults[k] != v}


def _ms(now_s: float | None = None) -> int:
    return int((time.time() if now_s is None else now_s) * 1000)

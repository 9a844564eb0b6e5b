"""Settings of the workers, the study runner and the tracking store, read from the environment.

Everything has a default that runs on one machine with no server (DESIGN.md §2, "Services"):

=============================  =====================================================================
``CBS_BROKER_URL``             Celery broker; unset = kombu's filesystem transport under
                               ``$CBS_HOME/broker`` (no daemon). ``redis://...`` or ``amqp://...``.
``CBS_BROKER_POLL_S``          Polling interval of the filesystem transport, seconds (default 0.1).
``CBS_TRACKING_URI``           MLflow tracking URI (else ``MLFLOW_TRACKING_URI``; default
                               ``sqlite:///<repo>/mlflow/store/mlflow.db``).
``CBS_ARTIFACT_ROOT``          Artifact root of new experiments (default: ``artifacts/`` beside a SQLite
                               store, ``<repo>/mlflow/store/artifacts`` for a database server, the
                               server's own for an ``http://`` tracking URI).
``CBS_OPTUNA_STORAGE``         Optuna storage URL (default ``sqlite:///$CBS_HOME/optuna/optuna.db``);
                               ``postgresql://`` URLs use psycopg2 unless they name a driver.
``CBS_LEDGER_URL``             The runner's ledger (trial leases, worker presence): a SQLAlchemy URL;
                               default = ``CBS_OPTUNA_STORAGE`` when set, else
                               ``sqlite:///$CBS_HOME/runner/ledger.db``.
``CBS_MAX_ATTEMPTS``           Lost attempts a trial may spend before it ends ``failed`` (3): a lost worker
                               spends one only when the attempt saved no checkpoint past the furthest
                               before it (a trial that kills its own worker); a kill after progress is free.
``CBS_TRIAL_SOFT_TIME_LIMIT_S`` Soft time limit of one trial, seconds (unset = none): the trial ends
                               ``failed`` with a message.
``CBS_TRIAL_TIME_LIMIT_S``     Hard time limit (the child is killed), seconds (unset = derived from each
                               trial's budget: ``workers.infra.time_limits``); set, it replaces the derived one.
``CBS_WORKER_REMOTE_CONTROL``  ``1`` turns on Celery's remote control (``celery inspect``/``control``:
                               anyone who can write to the broker could then shut workers down); off
                               by default. The lab needs none (presence lives in the ledger).
``CBS_HEARTBEAT_S``            Period of a running trial's heartbeat, seconds (5).
``CBS_STALE_AFTER_S``          A running trial whose heartbeat is older than this is lost (60).
``CBS_WATCH_PERIOD_S``         Period of ``cbs study watch``, seconds (10).
``CBS_WORKER_CONCURRENCY``     Trials at once of ``cbs worker`` without ``--concurrency`` (1; ``cbs up
                               --workers K`` sets it).
``CBS_CHECKPOINT_DIR``         Root of the trials' checkpoint folders (default ``$CBS_HOME/checkpoints``);
                               with several hosts, a folder every host mounts (NFS), so a trial lost
                               on one host resumes on another (``cbscore.paths.checkpoint_root``).
``CBS_STORE_DIR``              Root of the token stores, and a data root in place of ``$CBS_HOME/data``
                               (the default); with several hosts, a folder every host mounts: a
                               study's trials all train on the one store its first trial prepared,
                               and a host that cannot see it gives the attempt back (``workers.studies.stores``).
=============================  =====================================================================

Read elsewhere: ``CBS_CHECKPOINT_EVERY_S`` (a running trial's checkpoint period, 300 s),
``CBS_KEEP_CHECKPOINTS`` (keep a finished trial's checkpoint), ``CBS_TRIAL_QUEUE`` (force the
queue new trials go to; default ``gpu`` when a GPU worker is alive, else ``cpu``),
``CBS_TRACKING_UI_URL`` (the MLflow UI the app links to; default ``http://127.0.0.1:5000``), and,
set by ``cbs worker`` for its children, ``CUDA_VISIBLE_DEVICES``, ``CBS_TRIAL_DEVICE``,
``CBS_TORCH_THREADS``, ``CBS_WORKER_QUEUE`` and ``CBS_WORKER_DEVICE``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cbscore import paths
from cbscore.errors import ConfigError

#: The local MLflow store: config files in ``mlflow/`` are tracked, ``mlflow/store/`` is ignored.
MLFLOW_DIR = paths.REPO_ROOT / "mlflow"

#: Queue per device kind; a GPU worker consumes ``gpu``, a CPU worker ``cpu``.
QUEUES = ("cpu", "gpu")


@dataclass(frozen=True, kw_only=True)
class WorkerSettings:
    """Where the broker, the tracking store and the ledgers are, and the runner's clocks."""

    broker_url: str
    """Celery broker URL; ``filesystem://`` is the embedded transport."""
    broker_dir: Path | None
    """Folder of the filesystem transport (``None`` for a network broker)."""
    broker_poll_s: float
    """Polling interval of the filesystem transport, seconds."""
    tracking_uri: str
    """MLflow tracking URI (``sqlite:///...``, ``postgresql://...`` or ``http://host:port``)."""
    artifact_root: str | None
    """Artifact location given to new experiments (``None``: the store's default)."""
    optuna_storage: str
    """Optuna RDB storage URL."""
    ledger_url: str
    """SQLAlchemy URL of the runner's ledger (leases and worker presence)."""
    max_attempts: int
    max_give_backs: int = 20
    """How often a trial may give its attempt back because a store was unreachable before it
    fails (``CBS_MAX_GIVE_BACKS``; waits double from 15 s to 10 min between tries)."""
    """Attempts before a trial that keeps losing its worker ends ``failed``."""
    soft_time_limit_s: float | None
    """Soft time limit of a trial, seconds (``None``: none)."""
    time_limit_s: float | None
    """Hard time limit of a trial, seconds (``None``: none)."""
    heartbeat_s: float
    """Heartbeat period of a running trial, seconds."""
    stale_after_s: float
    """Age of a heartbeat after which a running trial is lost, seconds."""
    watch_period_s: float
    """Period of the ``cbs study watch`` loop, seconds."""
    remote_control: bool = False
    """Celery's remote control on the broker (``CBS_WORKER_REMOTE_CONTROL=1``); off by default."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError("CBS_MAX_ATTEMPTS", self.max_attempts, "must be a positive integer")
        if self.stale_after_s <= 2 * self.heartbeat_s:
            raise ConfigError("CBS_STALE_AFTER_S", self.stale_after_s,
                              f"must exceed twice CBS_HEARTBEAT_S={self.heartbeat_s}")
        if self.tracking_uri == self.optuna_storage:
            raise ConfigError("CBS_OPTUNA_STORAGE", self.optuna_storage,
                              "must be another database than CBS_TRACKING_URI (MLflow and Optuna each keep "
                              "their own schema version in the table alembic_version)")
        if self.broker_poll_s > 0.1:
            raise ConfigError("CBS_BROKER_POLL_S", self.broker_poll_s, "must be at most 0.1 s")

    @property
    def embedded_broker(self) -> bool:
        """True for the filesystem transport (no broker daemon)."""
        return self.broker_url.startswith("filesystem://")

    @property
    def local_tracking(self) -> bool:
        """True when MLflow is a database this process opens itself (not a tracking server)."""
        return not self.tracking_uri.startswith(("http://", "https://", "databricks"))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerSettings:
        env = os.environ if env is None else env
        broker_url = env.get("CBS_BROKER_URL") or "filesystem://"
        broker_dir = paths.subdir("broker") if broker_url.startswith("filesystem://") else None
        store = MLFLOW_DIR / "store"
        tracking_uri = env.get("CBS_TRACKING_URI") or env.get("MLFLOW_TRACKING_URI") or f"sqlite:///{store / 'mlflow.db'}"
        artifact_root = env.get("CBS_ARTIFACT_ROOT") or None
        if artifact_root is None and tracking_uri.startswith("sqlite:///"):
            artifact_root = str(Path(tracking_uri[len("sqlite:///"):]).parent / "artifacts")  # beside the db
        elif artifact_root is None and not tracking_uri.startswith(("http://", "https://", "databricks")):
            artifact_root = str(store / "artifacts")  # a database server: artifacts stay in the checkout
        optuna = env.get("CBS_OPTUNA_STORAGE") or ""
        if not optuna:
            optuna = f"sqlite:///{paths.subdir('optuna') / 'optuna.db'}"
        ledger = env.get("CBS_LEDGER_URL") or env.get("CBS_OPTUNA_STORAGE") or ""
        if not ledger:
            ledger = f"sqlite:///{paths.subdir('runner') / 'ledger.db'}"
        return cls(
            broker_url=broker_url,
            broker_dir=broker_dir,
            broker_poll_s=_number(env, "CBS_BROKER_POLL_S", 0.1),
            tracking_uri=with_driver(tracking_uri),
            artifact_root=artifact_root,
            optuna_storage=with_driver(optuna),
            ledger_url=with_driver(ledger),
            max_attempts=int(_number(env, "CBS_MAX_ATTEMPTS", 3, integer=True)),
            max_give_backs=int(_number(env, "CBS_MAX_GIVE_BACKS", 20, integer=True)),
            soft_time_limit_s=_optional(env, "CBS_TRIAL_SOFT_TIME_LIMIT_S"),
            time_limit_s=_optional(env, "CBS_TRIAL_TIME_LIMIT_S"),
            heartbeat_s=_number(env, "CBS_HEARTBEAT_S", 5.0),
            stale_after_s=_number(env, "CBS_STALE_AFTER_S", 60.0),
            watch_period_s=_number(env, "CBS_WATCH_PERIOD_S", 10.0),
            remote_control=env.get("CBS_WORKER_REMOTE_CONTROL", "") == "1",
        )


def with_driver(url: str) -> str:
    """``postgresql://`` → ``postgresql+psycopg2://``: SQLAlchemy 2.1 defaults to psycopg 3, and the
    driver CBS Lab ships is psycopg2 (``psycopg2-binary``). A URL that names a driver is kept."""
    if url.startswith(("postgresql://", "postgres://")):
        try:
            import psycopg  # noqa: F401  (psycopg 3 installed: SQLAlchemy's default works)
        except ImportError:
            return "postgresql+psycopg2://" + url.split("://", 1)[1]
    return url


def _number(env: Mapping[str, str], name: str, default: float, *, integer: bool = False) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ConfigError(name, raw, f"must be {kind}") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(name, raw, "must be positive")
    return value


def _optional(env: Mapping[str, str], name: str) -> float | None:
    return _number(env, name, 0.0) if env.get(name) else None


def settings() -> WorkerSettings:
    """The settings of this process, from ``os.environ`` (read each call: tests change the env)."""
    return WorkerSettings.from_env()


def default_concurrency() -> int:
    """``$CBS_WORKER_CONCURRENCY`` (set by ``cbs up --workers``), else 1."""
    raw = os.environ.get("CBS_WORKER_CONCURRENCY", "")
    if not raw:
        return 1
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError("CBS_WORKER_CONCURRENCY", raw, "must be a positive integer")
    return value

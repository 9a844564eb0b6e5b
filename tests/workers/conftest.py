"""Fixtures of the workers tests: a private state directory and stores per test, real worker
processes in their own process groups (killed by pgid at teardown), and a tiny study spec.

Every test gets its own ``CBS_HOME`` (broker folder, ledger, Optuna, checkpoints) and its own
SQLite MLflow store, so a message or a lease never leaks from one test into the next. The token
store is shared by the whole session (``store_dir``), built once.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.process_groups import stop_group

ROOT = Path(__file__).resolve().parents[2]
#: The session's small token store: the first 160 chapters of the built-in corpus, 320-token BPE
#: (a small vocabulary keeps the output head, most of a tiny model's compute, cheap).
STORE_DIR = ROOT / ".cache" / "workers-tests-store-v320-d160"
CBS = str(Path(sys.executable).parent / "cbs")
DATA = {"source": "builtin", "vocab_size": 320, "max_documents": 160, "val_fraction": 0.1,
        "store_dir": str(STORE_DIR)}


def tiny_spec_dict(name: str, **changes) -> dict:
    """A study that runs on two loaded CPU cores in about a minute: tiny-0.1M, T = 16, D = 15k tokens
    (117 steps at B_ref = 8), four batch sizes, one learning rate."""
    from cbscore.study import StudySpec

    spec = dict(name=name, kind="custom", settings=[{"model": "tiny-0.1M", "tokens": 15_000}],
                batch_sizes=[4, 8, 16, 32], b_ref=8, context_tokens=16, search={"kind": "grid", "lrs": [0.01]},
                data=dict(DATA))
    if "eval_windows" in {f.name for f in dataclasses.fields(StudySpec)}:
        spec["eval_windows"] = 16  # evaluation dominates a tiny trial otherwise
    spec.update(changes)
    return spec


def tiny_spec(name: str, **changes):
    from cbscore.study import StudySpec

    return StudySpec.from_dict(tiny_spec_dict(name, **changes))


@pytest.fixture(scope="session")
def token_store():
    """The shared small token store (prepared once; a no-op when up to date)."""
    from cbscore.data import DataConfig, prepare

    return prepare(DataConfig(**{k: v for k, v in DATA.items()}))


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory) -> Path:
    """An empty MLflow SQLite store, migrated once per session (migrations take seconds)."""
    from workers.tracking import prepare_store

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    prepare_store(f"sqlite:///{path}")
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the migrations into the main file, so a copy has them
    con.close()
    return path


@pytest.fixture
def mlflow_uri(tmp_path, mlflow_template) -> str:
    """A fresh MLflow store for this test (a copy of the migrated template)."""
    folder = tmp_path / "mlflow"
    folder.mkdir(exist_ok=True)
    shutil.copy(mlflow_template, folder / "mlflow.db")
    return f"sqlite:///{folder / 'mlflow.db'}"


@pytest.fixture
def worker_env(tmp_path, monkeypatch, mlflow_uri):
    """This test's environment: private state and stores, fast clocks, one torch thread."""
    home = tmp_path / "home"
    env = {
        "CBS_HOME": str(home),
        "CBS_TRACKING_URI": mlflow_uri,
        "CBS_ARTIFACT_ROOT": str(tmp_path / "mlflow" / "artifacts"),
        "CBS_HEARTBEAT_S": "1",
        "CBS_STALE_AFTER_S": "6",
        "CBS_WATCH_PERIOD_S": "1",
        "CBS_TORCH_THREADS": "1",
        "CBS_CHECKPOINT_EVERY_S": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    for key in ("CBS_BROKER_URL", "CBS_OPTUNA_STORAGE", "CBS_LEDGER_URL", "MLFLOW_TRACKING_URI", "CBS_TRIAL_QUEUE",
                "CBS_MAX_ATTEMPTS", "CBS_CHECKPOINT_DIR", "CBS_STORE_DIR"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    _reload_celery_app()
    yield env
    _reload_celery_app()


def _reload_celery_app() -> None:
    """The Celery app reads its settings at import: re-apply them for this test's environment."""
    if "workers.infra.broker" in sys.modules:
        from workers.infra.broker import reconfigure

        reconfigure()


class Processes:
    """Processes started by a test, each in its own session; stopped by process group."""

    def __init__(self, logs: Path):
        self.logs = logs
        self.procs: list[tuple[subprocess.Popen, Path]] = []

    def start(self, argv: list[str], name: str, env: dict | None = None) -> subprocess.Popen:
        """``argv`` in a new session with this process's environment (or ``env``), logged to a file."""
        log = self.logs / f"{name}-{len(self.procs)}.log"
        handle = open(log, "w")
        proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT,
                                env=dict(os.environ if env is None else env), cwd=ROOT, start_new_session=True)
        handle.close()
        self.procs.append((proc, log))
        return proc

    def worker(self, *extra: str) -> subprocess.Popen:
        return self.start([CBS, "worker", *extra], "worker")

    def kill(self, proc: subprocess.Popen, sig: int = signal.SIGKILL, wait_s: float = 20) -> None:
        """Signal the whole process group of ``proc`` (its pgid is its pid: a new session)."""
        stop_group(proc, sig, grace_s=wait_s)

    def log(self, proc: subprocess.Popen) -> str:
        for p, log in self.procs:
            if p is proc:
                return log.read_text(errors="replace")
        return ""

    def stop_all(self) -> None:
        """SIGKILL every group: each test's state is private, nothing needs a clean shutdown."""
        for proc, _ in self.procs:
            self.kill(proc, signal.SIGKILL)


@pytest.fixture
def processes(tmp_path):
    procs = Processes(tmp_path)
    yield procs
    procs.stop_all()


def wait_for(predicate, timeout_s: float, *, every_s: float = 0.5, what="condition"):
    """Poll ``predicate`` until it returns a truthy value; fail the test after ``timeout_s``
    (``what`` names the wait; a callable is called then, e.g. to show a worker's log)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what() if callable(what) else what}")
        time.sleep(every_s)

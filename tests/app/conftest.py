"""Fixtures of the app's tests: a real MLflow store with a seeded study, and AppTest runners."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"
STUDY = "seeded"


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie left to an init that does not reap counts as ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def _store_env(folder: Path) -> dict[str, str]:
    return {
        "CBS_HOME": str(folder / "home"),
        "CBS_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}",
        "CBS_ARTIFACT_ROOT": str(folder / "artifacts"),
        "CBS_LEDGER_URL": f"sqlite:///{folder / 'ledger.db'}",
        "CBS_OPTUNA_STORAGE": f"sqlite:///{folder / 'optuna.db'}",
        "CBS_TRACKING_UI_URL": "http://127.0.0.1:9",  # nothing listens: no MLflow UI links
    }


@pytest.fixture(scope="session")
def seeded_store(tmp_path_factory):
    """A real SQLite MLflow store holding study ``seeded`` (3 settings × 6 batch sizes × 3 learning
    rates, finished, plus 2 running trials); returns ``(env, settings)`` with the known answers."""
    from tests.app.store_seed import seed_study, spec_for
    from workers.tracking import Tracker

    env = _store_env(tmp_path_factory.mktemp("app-store"))
    with environment(env):
        settings = seed_study(Tracker(env["CBS_TRACKING_URI"], env["CBS_ARTIFACT_ROOT"]), spec_for(STUDY), running=2)
    return env, settings


@contextlib.contextmanager
def environment(env: dict[str, str]):
    """``env`` in ``os.environ`` for the block (a session fixture cannot use monkeypatch)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def app_env(seeded_store, monkeypatch):
    """The seeded store as this test's environment, with the app's caches empty."""
    env, settings = seeded_store
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    _clear_caches()
    yield settings
    _clear_caches()


@pytest.fixture
def empty_env(tmp_path, monkeypatch):
    """A fresh, empty store as this test's environment."""
    for k, v in _store_env(tmp_path).items():
        monkeypatch.setenv(k, v)
    _clear_caches()
    yield tmp_path
    _clear_caches()


def _clear_caches() -> None:
    import streamlit as st

    st.cache_data.clear()


@pytest.fixture
def app_test():
    """An AppTest of the whole app (navigation included), not yet run."""
    from streamlit.testing.v1 import AppTest

    return AppTest.from_file(str(APP), default_timeout=60)

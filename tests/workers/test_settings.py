"""Settings from the environment: defaults that need no server, overrides, and refusals."""

from __future__ import annotations

import pytest

from cbscore.errors import ConfigError
from workers.infra.settings import MLFLOW_DIR, WorkerSettings


def test_defaults_need_no_server(tmp_path, monkeypatch):
    monkeypatch.setenv("CBS_HOME", str(tmp_path))
    s = WorkerSettings.from_env({})
    assert s.broker_url == "filesystem://" and s.embedded_broker
    assert s.broker_dir == tmp_path / "broker" and s.broker_poll_s <= 0.1
    assert s.tracking_uri == f"sqlite:///{MLFLOW_DIR / 'store' / 'mlflow.db'}"
    assert s.artifact_root == str(MLFLOW_DIR / "store" / "artifacts")
    assert s.optuna_storage == f"sqlite:///{tmp_path / 'optuna' / 'optuna.db'}"
    assert s.ledger_url == f"sqlite:///{tmp_path / 'runner' / 'ledger.db'}"
    assert (s.max_attempts, s.soft_time_limit_s, s.time_limit_s) == (3, None, None)
    assert s.local_tracking


def test_environment_overrides(tmp_path, monkeypatch):
    monkeypatch.setenv("CBS_HOME", str(tmp_path))
    s = WorkerSettings.from_env({
        "CBS_BROKER_URL": "redis://127.0.0.1:6379/3", "MLFLOW_TRACKING_URI": "http://127.0.0.1:5000",
        "CBS_OPTUNA_STORAGE": "postgresql://postgres@127.0.0.1/cbs", "CBS_MAX_ATTEMPTS": "5",
        "CBS_TRIAL_TIME_LIMIT_S": "3600", "CBS_TRIAL_SOFT_TIME_LIMIT_S": "3500",
    })
    assert s.broker_url == "redis://127.0.0.1:6379/3" and not s.embedded_broker and s.broker_dir is None
    assert s.tracking_uri == "http://127.0.0.1:5000" and not s.local_tracking and s.artifact_root is None
    # The ledger follows Optuna onto PostgreSQL, so several hosts share it.
    assert s.ledger_url == s.optuna_storage == "postgresql+psycopg2://postgres@127.0.0.1/cbs"
    assert (s.max_attempts, s.time_limit_s, s.soft_time_limit_s) == (5, 3600.0, 3500.0)
    # CBS_TRACKING_URI wins over MLflow's own variable.
    both = WorkerSettings.from_env({"CBS_TRACKING_URI": "sqlite:////x.db", "MLFLOW_TRACKING_URI": "http://h:1"})
    assert both.tracking_uri == "sqlite:////x.db" and both.artifact_root == "/artifacts"  # beside the store
    pg = WorkerSettings.from_env({"CBS_TRACKING_URI": "postgresql://u@h/mlflow"})
    assert pg.tracking_uri == "postgresql+psycopg2://u@h/mlflow"  # the driver in deps (SQLAlchemy 2.1: psycopg 3)
    assert pg.artifact_root == str(MLFLOW_DIR / "store" / "artifacts")


def test_mlflow_and_optuna_cannot_share_one_database(tmp_path, monkeypatch):
    monkeypatch.setenv("CBS_HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="must be another database than CBS_TRACKING_URI"):
        WorkerSettings.from_env({"CBS_TRACKING_URI": "postgresql://u@h/db", "CBS_OPTUNA_STORAGE": "postgresql://u@h/db"})


@pytest.mark.parametrize("name, value, words", [
    ("CBS_MAX_ATTEMPTS", "two", "must be an integer, but got 'two'."),
    ("CBS_MAX_ATTEMPTS", "0", "must be positive, but got '0'."),
    ("CBS_HEARTBEAT_S", "-1", "must be positive, but got '-1'."),
    ("CBS_BROKER_POLL_S", "0.5", "must be at most 0.1 s, but got 0.5."),
    ("CBS_STALE_AFTER_S", "3", "must exceed twice CBS_HEARTBEAT_S=5.0, but got 3.0."),
])
def test_bad_values_name_the_variable(name, value, words, tmp_path, monkeypatch):
    monkeypatch.setenv("CBS_HOME", str(tmp_path))
    with pytest.raises(ConfigError) as err:
        WorkerSettings.from_env({name: value})
    assert str(err.value) == f"{name}: {words}"

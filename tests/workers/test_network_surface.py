"""The workers' network surface (issue 21, finding 6 and "MLflow behind credentials"): Celery's
remote control is off by default, and ``cbs tracking --auth`` runs MLflow's basic-auth app with the
lab's service account."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest
from celery import Celery

from cbscore.errors import ConfigError
from tests.workers.conftest import CBS
from workers.cli_processes import tracking_argv, tracking_auth_config
from workers.infra.broker import configure
from workers.infra.settings import WorkerSettings


@pytest.mark.parametrize("env, on", [({"CBS_BROKER_URL": "redis://127.0.0.1:6379/0"}, False),
                                     ({"CBS_BROKER_URL": "redis://127.0.0.1:6379/0", "CBS_WORKER_REMOTE_CONTROL": "1"}, True),
                                     ({}, False)])
def test_remote_control_is_off_unless_the_operator_turns_it_on(env, on):
    app = Celery("t")
    configure(app, WorkerSettings.from_env(env))
    assert app.conf.worker_enable_remote_control is on


def test_tracking_auth_needs_the_service_account(worker_env):
    with pytest.raises(ConfigError) as err:
        tracking_auth_config({})
    assert err.value.field == "MLFLOW_TRACKING_USERNAME"
    path = tracking_auth_config({"MLFLOW_TRACKING_USERNAME": "cbs", "MLFLOW_TRACKING_PASSWORD": "pw-not-in-file"})
    text = path.read_text()
    assert "default_permission = NO_PERMISSIONS" in text and "admin_username = cbs" in text
    assert "pw-not-in-file" not in text
    assert oct((path.parent / "flask-secret").stat().st_mode)[-3:] == "600"
    assert tracking_argv("127.0.0.1", 5000, 1, auth=True)[-2:] == ["--app-name", "basic-auth"]


def test_the_service_password_may_come_from_a_file(tmp_path):
    secret = tmp_path / "mlflow-password"
    secret.write_text("from-a-file\n")
    secret.chmod(0o600)
    env = {"MLFLOW_TRACKING_USERNAME": "cbs", "CBS_TRACKING_PASSWORD_FILE": str(secret)}
    from workers.tracking import load_service_password

    load_service_password(env)
    assert env["MLFLOW_TRACKING_PASSWORD"] == "from-a-file"
    env = {"MLFLOW_TRACKING_PASSWORD": "from-env", "CBS_TRACKING_PASSWORD_FILE": str(secret)}
    load_service_password(env)
    assert env["MLFLOW_TRACKING_PASSWORD"] == "from-env"  # the environment wins


def _status(url: str, auth: tuple[str, str] | None = None) -> int:
    import base64

    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:  # not listening yet
        return 0


@pytest.mark.slow  # MLflow's auth app starts in 20-40 s on two loaded cores
def test_tracking_with_auth_refuses_requests_without_the_service_account(worker_env, processes, monkeypatch):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "cbs-service")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "a-long-service-password")
    processes.start([CBS, "tracking", "--auth", "--port", str(port)], "tracking")
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while _status(f"{base}/health") != 200:
        assert time.time() < deadline, "cbs tracking --auth did not answer"
        time.sleep(1)
    url = f"{base}/api/2.0/mlflow/experiments/search?max_results=1"
    assert _status(url) == 401
    assert _status(url, ("cbs-service", "wrong")) == 401
    assert _status(url, ("cbs-service", "a-long-service-password")) == 200


def test_the_tracking_servers_command_line_holds_no_store_url(worker_env, monkeypatch):
    """Issue 41, finding 7: `ps` shows every user of the host a process's arguments."""
    monkeypatch.setenv("CBS_TRACKING_URI", "postgresql://cbs:hunter2-db@db/cbs_mlflow")
    argv = tracking_argv("127.0.0.1", 5000, 2)
    assert "--backend-store-uri" not in argv and not any("hunter2-db" in a or "postgresql" in a for a in argv)
    assert argv[1:] == ["server", "--artifacts-destination", worker_env["CBS_ARTIFACT_ROOT"], "--host", "127.0.0.1",
                        "--port", "5000", "--workers", "2"]


@pytest.mark.slow  # MLflow starts in 10-30 s on two loaded cores
def test_cbs_tracking_serves_its_store_from_the_environment_not_the_command_line(worker_env, processes):
    import json
    import socket
    from pathlib import Path

    from tests.workers.conftest import tiny_spec, wait_for
    from workers.query import api

    assert api.launch_study(tiny_spec("in-store")) == "in-store"  # written to the SQLite store directly
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = processes.start([CBS, "tracking", "--port", str(port), "--workers", "1"], "tracking")
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: _status(f"{base}/health") == 200, 90, what=lambda: processes.log(server)[-2000:])
    request = urllib.request.Request(f"{base}/api/2.0/mlflow/experiments/search", method="POST",
                                     data=b'{"max_results": 100}', headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        names = {e["name"] for e in json.loads(resp.read())["experiments"]}
    assert "in-store" in names  # the server reads the store it was given through its environment
    store = worker_env["CBS_TRACKING_URI"]
    group = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _in_group(p, server.pid)]
    assert len(group) >= 2  # mlflow server and its uvicorn
    for proc in group:
        cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        assert store not in cmdline and "backend-store-uri" not in cmdline, cmdline


def _in_group(proc, pgid: int) -> bool:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid
    except (OSError, ValueError, IndexError):
        return False

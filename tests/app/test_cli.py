"""``cbs web`` and ``cbs up``: the command lines, bad ports, and the supervisor on a Procfile (real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app import cli
from cbscore.errors import ConfigError
from tests.app.conftest import alive

CBS = str(Path(sys.executable).parent / "cbs")


def test_streamlit_runs_headless_on_localhost_without_usage_stats():
    cmd = cli.streamlit_command(8600)
    assert cmd[:5] == [sys.executable, "-m", "streamlit", "run", str(cli.APP_SCRIPT)]
    options = dict(zip(cmd[5::2], cmd[6::2]))
    assert options["--server.address"] == "127.0.0.1"
    assert options["--server.port"] == "8600"
    assert options["--server.headless"] == "true"
    assert options["--browser.gatherUsageStats"] == "false"


def test_port_comes_from_the_flag_then_the_environment(monkeypatch):
    monkeypatch.delenv("CBS_WEB_PORT", raising=False)
    assert cli.web_port(None) == 8501
    monkeypatch.setenv("CBS_WEB_PORT", "9001")
    assert cli.web_port(None) == 9001
    assert cli.web_port(9002) == 9002


@pytest.mark.parametrize("flag, env, field, value", [
    (0, None, "--port", 0),
    (70000, None, "--port", 70000),
    (None, "web", "CBS_WEB_PORT", "web"),
])
def test_bad_port_names_the_setting_and_the_value(monkeypatch, flag, env, field, value):
    if env is None:
        monkeypatch.delenv("CBS_WEB_PORT", raising=False)
    else:
        monkeypatch.setenv("CBS_WEB_PORT", env)
    with pytest.raises(ConfigError) as err:
        cli.web_port(flag)
    assert err.value.field == field and err.value.value == value
    assert str(err.value).endswith(f"but got {value!r}.")


def test_up_runs_one_trial_per_core_up_to_four_unless_told(monkeypatch):
    monkeypatch.delenv("CBS_WORKER_CONCURRENCY", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert cli.up_workers(None) == 2
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert cli.up_workers(None) == cli.MAX_DEFAULT_WORKERS == 4
    assert cli.up_workers(6) == 6
    monkeypatch.setenv("CBS_WORKER_CONCURRENCY", "3")
    assert cli.up_workers(None) == 3


@pytest.mark.parametrize("flag, env, field, value", [(0, None, "--workers", 0), (None, "two", "CBS_WORKER_CONCURRENCY", "two")])
def test_bad_worker_counts_name_the_setting(monkeypatch, flag, env, field, value):
    from workers.infra.settings import default_concurrency

    monkeypatch.delenv("CBS_WORKER_CONCURRENCY", raising=False)
    if env is not None:
        monkeypatch.setenv("CBS_WORKER_CONCURRENCY", env)
    with pytest.raises(ConfigError) as err:
        cli.up_workers(flag)
    assert (err.value.field, err.value.value) == (field, value)
    if env is not None:  # `cbs worker` reads the same variable
        with pytest.raises(ConfigError) as err:
            default_concurrency()
        assert (err.value.field, err.value.value) == (field, value)


def test_up_refuses_a_missing_procfile(tmp_path):
    result = subprocess.run([CBS, "up", "--skip-data", "--procfile", str(tmp_path / "nope")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "cbs up: error: --procfile: must be an existing Procfile" in result.stderr


def test_up_runs_the_procfile_prints_the_urls_and_ctrl_c_stops_everything(tmp_path):
    pid_file = tmp_path / "sleeper.pid"
    procfile = tmp_path / "Procfile"
    procfile.write_text(
        f"sleeper: {sys.executable} -c \"import os, time; open('{pid_file}', 'w').write(str(os.getpid())); "
        "print('sleeping with', os.environ['CBS_WORKER_CONCURRENCY'], 'trials', flush=True); time.sleep(120)\"\n")
    env = dict(os.environ, CBS_TRACKING_UI_URL="http://127.0.0.1:9")
    proc = subprocess.Popen([CBS, "up", "--skip-data", "--procfile", str(procfile), "--port", "8777", "--workers", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        deadline = time.time() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert proc.poll() is None, proc.stdout.read()
            assert time.time() < deadline, "the Procfile's process did not start"
            time.sleep(0.2)
        sleeper = int(pid_file.read_text())
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "cbs up: web app at http://127.0.0.1:8777" in output
    assert "sleeping with 3 trials" in output  # the Procfile's `cbs worker` reads CBS_WORKER_CONCURRENCY
    assert "the worker runs 3 trial(s) at once" in output
    assert not alive(sleeper)



def _websocket_status(port: int, host_header: str) -> int:
    """The HTTP status the app's websocket endpoint answers a handshake with ``Host: host_header``."""
    import base64
    import socket

    key = base64.b64encode(os.urandom(16)).decode()
    request = (f"GET /_stcore/stream HTTP/1.1\r\nHost: {host_header}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
               f"Sec-WebSocket-Protocol: streamlit\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request.encode())
        status_line = sock.recv(4096).split(b"\r\n", 1)[0].decode()
    return int(status_line.split()[1])


def test_the_web_app_refuses_a_rebound_host_name(tmp_path):
    """Issue 12, item 11: a page whose domain was re-pointed at 127.0.0.1 (DNS rebinding) connects
    with its own name in ``Host``; the app must refuse it and still serve its own names."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, CBS_HOME=str(tmp_path / "home"), CBS_TRACKING_URI=f"sqlite:///{tmp_path / 'm.db'}")
    proc = subprocess.Popen([CBS, "web", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True, cwd=tmp_path)
    try:
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read()
                break
            except Exception:
                assert proc.poll() is None and time.time() < deadline, "the web app did not start"
                time.sleep(0.5)
        assert _websocket_status(port, f"127.0.0.1:{port}") == 101
        assert _websocket_status(port, f"localhost:{port}") == 101
        assert _websocket_status(port, f"attacker.example:{port}") == 403
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_extra_host_names_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("CBS_WEB_ALLOWED_HOSTS", "lab.example.com, *.corp.example")
    assert cli.allowed_hosts("0.0.0.0") == ["localhost", "127.0.0.1", "::1", "lab.example.com", "*.corp.example"]
    assert cli.allowed_hosts("10.0.0.5")[3] == "10.0.0.5"

"""The web app's network surface (issue 21, findings 1 and 6): the Host check answers on every
HTTP route and the WebSocket, tested with real HTTP requests against a real ``cbs web``; a
non-loopback address is refused without sign-in unless ``--insecure-no-auth``."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli import check_bind, is_loopback
from app.host_check import host_allowed
from cbscore.errors import ConfigError
from tests.process_groups import stop_group

CBS = str(Path(sys.executable).parent / "cbs")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str, host: str, headers: dict | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest("GET", path, skip_host=True)
    conn.putheader("Host", host)
    for key, value in (headers or {}).items():
        conn.putheader(key, value)
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, body


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    """A real ``cbs web`` on a free loopback port (no sign-in: loopback needs none)."""
    tmp = tmp_path_factory.mktemp("web-guard")
    port = free_port()
    env = {**os.environ, "CBS_HOME": str(tmp / "home"), "CBS_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}",
           "CBS_WEB_SECRETS": str(tmp / "none.toml")}
    log = open(tmp / "web.log", "w")
    proc = subprocess.Popen([CBS, "web", "--port", str(port)], env=env, cwd=tmp, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if get(port, "/_stcore/health", f"127.0.0.1:{port}")[0] == 200:
                    break
            except OSError:
                time.sleep(0.3)
        else:
            pytest.fail(f"cbs web did not answer: {(tmp / 'web.log').read_text()[-2000:]}")
        yield port
    finally:
        stop_group(proc)


@pytest.mark.parametrize("path", ["/", "/_stcore/health", "/_stcore/host-config", "/_stcore/script-health-check",
                                  "/_stcore/upload_file/x/y", "/media/x.png", "/studies", "/static/x.js"])
def test_every_http_route_refuses_a_foreign_host(web, path):
    status, body = get(web, path, "rebind.attacker.example")
    assert status == 403 and b"not served here" in body


def test_the_websocket_refuses_a_foreign_host(web):
    status, _ = get(web, "/_stcore/stream", "rebind.attacker.example", {
        "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Origin": "http://rebind.attacker.example"})
    assert status == 403


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}"])
def test_the_loopback_names_are_served(web, host):
    assert get(web, "/_stcore/health", host.format(port=web))[0] == 200
    assert get(web, "/", host.format(port=web))[0] == 200


def test_host_patterns():
    patterns = ["localhost", "127.0.0.1", "::1", "lab.example.com", "*.corp.example"]
    assert host_allowed("lab.example.com:8501", patterns) and host_allowed("a.corp.example", patterns)
    assert host_allowed("[::1]:8501", patterns)
    for bad in (None, "", "evil.example", "lab.example.com.evil", "user@localhost", "localhost:x", "corp.example"):
        assert not host_allowed(bad, patterns)


def test_a_non_loopback_address_needs_sign_in_or_the_insecure_flag():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("10.1.2.3")
    assert check_bind("127.0.0.1", auth=False, insecure=False) is None  # `make run`: no sign-in on loopback
    assert check_bind("0.0.0.0", auth=True, insecure=False) is None
    with pytest.raises(ConfigError) as err:
        check_bind("0.0.0.0", auth=False, insecure=False)
    assert err.value.field == "CBS_WEB_HOST" and "--insecure-no-auth" in err.value.reason
    assert "WARNING" in check_bind("0.0.0.0", auth=False, insecure=True)


def test_cbs_web_refuses_to_bind_every_interface_without_sign_in(tmp_path):
    env = {**os.environ, "CBS_HOME": str(tmp_path / "home"), "CBS_WEB_HOST": "0.0.0.0",
           "CBS_WEB_SECRETS": str(tmp_path / "none.toml")}
    env.pop("CBS_INSECURE_NO_AUTH", None)
    out = subprocess.run([CBS, "web", "--port", str(free_port())], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "CBS_WEB_HOST: is not a loopback address" in out.stderr
    assert "Traceback" not in out.stderr


def test_cbs_web_warns_on_every_insecure_start(tmp_path):
    port = free_port()
    env = {**os.environ, "CBS_HOME": str(tmp_path / "home"), "CBS_WEB_SECRETS": str(tmp_path / "none.toml")}
    proc = subprocess.Popen([CBS, "web", "--host", "0.0.0.0", "--port", str(port), "--insecure-no-auth"], env=env,
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("cbs web: WARNING: listening on 0.0.0.0 without sign-in (--insecure-no-auth)")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

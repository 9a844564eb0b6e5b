"""Issue 41 against a live ``cbs web`` with sign-in and a real OIDC provider on 127.0.0.1, driven
as an attacker drives it (HTTP, a WebSocket, the provider's form; no browser needed):

* finding 2: Streamlit's side doors answer strangers nothing (uploads, metrics, media: ``401``), an
  unsigned upload flood leaves the web process's memory where it was, and a signed-in session's
  uploads are capped in count and bytes (``app/sign_in_guard.py``);
* finding 3: a provider that vouches for the e-mail ``local`` or ``cli:root`` signs in a user who is
  neither the local user, a command-line user, nor an admin (``app/auth.py``);
* finding 8: a session that signed out is refused wherever its cookie is sent (``app/signed_out.py``).

A stranger's tools are real ones: a WebSocket to ``/_stcore/stream`` (the sign-in page's) gives a
live session id, and ``/_stcore/health`` gives an XSRF pair, as the attack on the last round did.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.app.test_e2e_browser import _free_port, _wait_http
from tests.app.test_sign_in import provider  # noqa: F401  (the same OIDC provider fixture)
from tests.process_groups import stop_group

pytestmark = [pytest.mark.timeout(240)]


def _start_web(folder: Path, provider_url: str, env: dict[str, str], secret: str) -> tuple[int, subprocess.Popen]:
    """``cbs web`` started with ``[auth]`` pointing at the provider and ``cookie_secret`` ``secret``
    (its output in ``folder/web.log``); ``(port, process)``, not waited for."""
    port = _free_port()
    secrets_file = folder / "secrets.toml"
    secrets_file.write_text(
        "[auth]\n"
        f'redirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
        f'cookie_secret = "{secret}"\n'
        'client_id = "cbs-lab"\nclient_secret = "cbs-lab-secret"\n'
        f'server_metadata_url = "{provider_url}/.well-known/openid-configuration"\n')
    full_env = {**os.environ, "CBS_HOME": str(folder / "home"), "CBS_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}",
                "CBS_WEB_SECRETS": str(secrets_file), "PYTHONUNBUFFERED": "1", **env}
    for key in ("CBS_BROKER_URL", "CBS_LEDGER_URL", "CBS_OPTUNA_STORAGE", "MLFLOW_TRACKING_URI"):
        full_env.pop(key, None)
    with open(folder / "web.log", "w") as log:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "cbs"), "web", "--port", str(port)], env=full_env,
                                cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return port, proc


@contextlib.contextmanager
def web_signing_in(folder: Path, provider_url: str, env: dict[str, str]):
    """``cbs web`` with ``[auth]`` pointing at the provider; yields ``(port, cookie secret, pid)``."""
    secret = secrets.token_hex(32)
    port, proc = _start_web(folder, provider_url, env, secret)
    try:
        _wait_http(f"http://127.0.0.1:{port}/_stcore/health", 90)
        yield port, secret, proc.pid
    finally:
        stop_group(proc)


#: Seconds a fresh ``cbs web`` may take to say it is warm (4.2-9.6 s measured on the loaded host).
WARM_WITHIN_S = 60.0


def wait_warm(log: Path, timeout_s: float = WARM_WITHIN_S, line: str = "") -> str:
    """The web app's log line that says its workers' stack is imported (``line``, by default
    :data:`app.warm_up.WARM_LINE`), waited for; an AssertionError with the log's end if it does not come."""
    from app.warm_up import WARM_LINE

    line = line or WARM_LINE
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        said = [s for s in Path(log).read_text().splitlines() if s.startswith(line)]
        if said:
            return said[0]
        time.sleep(0.1)
    raise AssertionError(f"cbs web did not say {line!r} within {timeout_s} s: {Path(log).read_text()[-1500:]}")


def _request(port: int, method: str, path: str, body: bytes = b"", headers: dict | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Host": f"127.0.0.1:{port}", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (BrokenPipeError, ConnectionResetError):  # answered before the body was read: read the answer
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _xsrf(port: int) -> str:
    """The XSRF cookie ``/_stcore/health`` hands anyone (its value passes as the header too)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/_stcore/health", headers={"Host": f"127.0.0.1:{port}"})
    resp = conn.getresponse()
    resp.read()
    cookie = next(c for c in resp.headers.get_all("set-cookie") if c.startswith("_streamlit_xsrf="))
    return cookie.split(";", 1)[0].split("=", 1)[1]


@contextlib.contextmanager
def _app_run(port: int, xsrf: str, cookies: str = ""):
    """A WebSocket to ``/_stcore/stream`` (as a browser opens it) that asked for a run of the app;
    yields an iterator over the ``(ForwardMsg, raw bytes)`` the server sends, and ``click(widget
    id)``, which asks for the run a click on that button makes."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from websockets.sync.client import connect

    headers = {"Origin": f"http://127.0.0.1:{port}", "Cookie": f"_streamlit_xsrf={xsrf}" + (f"; {cookies}" if cookies else "")}
    with connect(f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit", xsrf],
                 additional_headers=headers, max_size=None, open_timeout=30) as ws:
        def click(widget_id: str | None = None) -> None:
            back = BackMsg()
            back.rerun_script.query_string = ""
            if widget_id:
                state = back.rerun_script.widget_states.widgets.add()
                state.id, state.trigger_value = widget_id, True
            ws.send(back.SerializeToString())

        click()

        def messages():
            deadline = time.time() + 90
            while time.time() < deadline:
                raw = ws.recv(timeout=90)
                msg = ForwardMsg()
                msg.ParseFromString(raw)
                yield msg, raw
            raise TimeoutError("the app's run did not finish")
        yield messages(), click


@contextlib.contextmanager
def live_session(port: int, xsrf: str, cookies: str = ""):
    """A live session of the app (its WebSocket stays open); yields its session id."""
    with _app_run(port, xsrf, cookies) as (messages, _):
        for msg, _ in messages:
            if msg.WhichOneof("type") == "new_session":
                yield msg.new_session.initialize.session_id
                return


def _upload(port: int, xsrf: str, session: str, file_id: str, size: int, cookies: str = "") -> int:
    boundary = "cbslabboundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.csv\"\r\n"
            "Content-Type: text/csv\r\n\r\n").encode() + b"a" * size + f"\r\n--{boundary}--\r\n".encode()
    status, _ = _request(port, "PUT", f"/_stcore/upload_file/{session}/{file_id}", body, {
        "Content-Type": f"multipart/form-data; boundary={boundary}", "X-Xsrftoken": xsrf,
        "Cookie": f"_streamlit_xsrf={xsrf}" + (f"; {cookies}" if cookies else "")})
    return status


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _signed_cookie(secret: str, port: int, email: str) -> str:
    """A sign-in cookie as Streamlit's /oauth2callback signs it (what a real sign-in leaves)."""
    from streamlit.web.server.starlette.starlette_app_utils import create_signed_value

    claims = {"email": email, "email_verified": True, "sub": email, "iss": "http://idp.test",
              "origin": f"http://127.0.0.1:{port}", "is_logged_in": True, "provider": "default"}
    return "_streamlit_user=" + create_signed_value(secret, "_streamlit_user", json.dumps(claims)).decode()


def test_a_stranger_gets_nothing_from_uploads_metrics_or_media_and_a_flood_leaves_memory_alone(tmp_path, provider):
    with web_signing_in(tmp_path, provider, {}) as (port, _, pid):
        assert _request(port, "GET", "/_stcore/health")[0] == 200  # the sign-in flow itself stays open
        assert _request(port, "GET", "/")[0] == 200
        status, body = _request(port, "GET", "/_stcore/metrics")
        assert (status, body) == (401, b"401: sign in to CBS Lab first\n")
        assert _request(port, "GET", "/media/0123456789abcdef.csv")[0] == 401
        xsrf = _xsrf(port)
        with live_session(port, xsrf) as session:
            wait_warm(tmp_path / "web.log")  # the workers' stack, imported as the server starts, is not the flood's
            before = _rss_mib(pid)
            start = time.perf_counter()
            statuses = [_upload(port, xsrf, session, f"f{i}", 16 * 2**20) for i in range(12)]  # 192 MiB in all
            assert statuses == [401] * 12
            assert time.perf_counter() - start < 12.0  # each refused at once, not after reading 16 MiB
            time.sleep(1)
            assert _rss_mib(pid) - before < 40  # the flood held nothing (it grew by the files' 192 MiB before)


def test_a_signed_in_session_holds_a_bounded_number_and_size_of_uploads(tmp_path, provider):
    env = {"CBS_WEB_SESSION_FILES": "3", "CBS_WEB_SESSION_MB": "2"}
    with web_signing_in(tmp_path, provider, env) as (port, secret, _):
        cookie = _signed_cookie(secret, port, "alice@lab.test")
        xsrf = _xsrf(port)
        status, _ = _request(port, "GET", "/_stcore/metrics", headers={"Cookie": cookie})
        assert status == 200  # a signed-in user reads them
        with live_session(port, xsrf, cookie) as session:
            assert [_upload(port, xsrf, session, f"f{i}", 500_000, cookie) for i in range(3)] == [204, 204, 204]
            assert _upload(port, xsrf, session, "f3", 1000, cookie) == 413  # a fourth file
            assert _request(port, "DELETE", f"/_stcore/upload_file/{session}/f0", headers={
                "X-Xsrftoken": xsrf, "Cookie": f"_streamlit_xsrf={xsrf}; {cookie}"})[0] == 204
            assert _upload(port, xsrf, session, "f3", 1000, cookie) == 204  # room again
            assert _upload(port, xsrf, session, "f4", 1_000_000, cookie) == 413  # files: 3 held; and bytes
            assert _request(port, "DELETE", f"/_stcore/upload_file/{session}/f3", headers={
                "X-Xsrftoken": xsrf, "Cookie": f"_streamlit_xsrf={xsrf}; {cookie}"})[0] == 204
            assert _upload(port, xsrf, session, "f4", 1_500_000, cookie) == 413  # 1.0 MB held + 1.5 MB > 2 MB
            assert _upload(port, xsrf, session, "f4", 900_000, cookie) == 204


def _page_bytes(port: int, xsrf: str, cookies: str) -> bytes:
    """What one run of the app sends a browser with ``cookies`` (its messages, as bytes)."""
    sent = b""
    with _app_run(port, xsrf, cookies) as (messages, _):
        for msg, raw in messages:
            sent += raw
            if msg.WhichOneof("type") == "script_finished":
                return sent
    raise AssertionError("unreachable")


def test_a_session_that_signed_out_is_refused_everywhere_though_its_cookie_is_still_sent(tmp_path, provider,
                                                                                       monkeypatch):
    """Issue 41, finding 8 (second half): a copy of a signed-out cookie stayed valid for 30 days."""
    from app.signed_out import revoke

    with web_signing_in(tmp_path, provider, {}) as (port, secret, _):
        cookie = _signed_cookie(secret, port, "alice@lab.test")
        xsrf = _xsrf(port)
        page = _page_bytes(port, xsrf, cookie)
        assert b"Signed in as **alice@lab.test**" in page
        assert _request(port, "GET", "/_stcore/metrics", headers={"Cookie": cookie})[0] == 200
        monkeypatch.setenv("CBS_HOME", str(tmp_path / "home"))  # the web app's own state directory
        name, value = cookie.split("=", 1)
        assert revoke({name: value, "_streamlit_xsrf": xsrf})  # what "Sign out" records
        assert oct((tmp_path / "home" / "auth" / "signed-out.json").stat().st_mode)[-3:] == "600"
        page = _page_bytes(port, xsrf, cookie)  # the same cookie, sent again (a copy, another browser)
        assert b"Sign in to see and launch studies" in page and b"Signed in as" not in page
        assert _request(port, "GET", "/_stcore/metrics", headers={"Cookie": cookie})[0] == 401
        other = _signed_cookie(secret, port, "bob@lab.test")  # another session is untouched
        assert _request(port, "GET", "/_stcore/metrics", headers={"Cookie": other})[0] == 200


def _provider_token(secret: str) -> str:
    """The ``provider`` token ``st.login()`` hands the browser (a JWT signed with the cookie secret)."""
    from streamlit import config
    from streamlit.auth_util import encode_provider_token

    saved = config.get_option("server.cookieSecret")
    config.set_option("server.cookieSecret", secret)
    try:
        return encode_provider_token("default")
    finally:
        config.set_option("server.cookieSecret", saved)


def _sign_in_over_http(web: str, secret: str, provider_url: str, sub: str, claims: dict) -> str:
    """Streamlit's real sign-in flow, as a browser follows it after "Sign in", without one:
    ``/auth/login``, the provider's form, ``/oauth2callback``; the provider gives ``sub`` the
    ``claims``. Returns the sign-in cookie(s) the app set, as a Cookie header."""
    from urllib.parse import urljoin

    import httpx

    assert httpx.put(f"{provider_url}/users/{sub}", json=claims, timeout=10).status_code == 204
    with httpx.Client(follow_redirects=False, timeout=30) as client:
        to_provider = client.get(f"{web}/auth/login", params={"provider": _provider_token(secret)})
        assert to_provider.status_code in (302, 303, 307), to_provider.text[:200]
        form = urljoin(str(to_provider.url), to_provider.headers["location"])
        back = client.post(form, data={"sub": sub})
        assert back.status_code in (302, 303), (form, back.text[:200])
        done = client.get(urljoin(form, back.headers["location"]))
        assert done.status_code in (302, 303, 307), done.text[:200]
        jar = {c.name: c.value for c in client.cookies.jar if c.name.startswith("_streamlit_user")}
    assert jar, "the app set no sign-in cookie"
    return "; ".join(f"{k}={v}" for k, v in jar.items())


def test_a_provider_that_says_local_signs_in_a_user_who_is_neither_local_nor_an_admin(tmp_path, provider):
    """Issue 41, finding 3, end to end: a real provider vouches for e-mail ``local`` (and
    ``cli:root``), verified; the app signs the user in as their issuer and subject."""
    with web_signing_in(tmp_path, provider, {"CBS_ADMINS": "admin@lab.test"}) as (port, secret, _):
        web = f"http://127.0.0.1:{port}"
        xsrf = _xsrf(port)
        for sub, email in (("mallory", "local"), ("eve", "cli:root")):
            cookie = _sign_in_over_http(web, secret, provider, sub, {"email": email, "email_verified": True})
            page = _page_bytes(port, xsrf, cookie)
            assert f"Signed in as **oidc:{provider}#{sub}**".encode() in page, page[-400:]
            assert b"(admin)" not in page
        cookie = _sign_in_over_http(web, secret, provider, "admin-sub",
                                    {"email": "admin@lab.test", "email_verified": True})
        assert b"Signed in as **admin@lab.test** (admin)" in _page_bytes(port, xsrf, cookie)


def test_the_sign_out_button_ends_the_session_on_the_server(tmp_path, provider):
    """Issue 41, finding 8: "Sign out" in the sidebar (clicked over the app's WebSocket, as a browser
    clicks it) records the session, and a copy of its cookie signs no one in afterwards."""
    import re

    with web_signing_in(tmp_path, provider, {}) as (port, secret, _):
        web = f"http://127.0.0.1:{port}"
        cookie = _sign_in_over_http(web, secret, provider, "alice@lab.test",
                                    {"email": "alice@lab.test", "email_verified": True})
        xsrf = _xsrf(port)
        assert _request(port, "GET", "/_stcore/metrics", headers={"Cookie": cookie})[0] == 200
        with _app_run(port, xsrf, cookie) as (messages, click):
            sent = b""
            for msg, raw in messages:
                sent += raw
                if msg.WhichOneof("type") == "script_finished":
                    break
            (button,) = set(re.findall(rb"\$\$ID-[0-9a-f]+-auth\.sign_out", sent))
            click(button.decode())
            for msg, _ in messages:
                if msg.WhichOneof("type") == "script_finished":
                    break
        assert (tmp_path / "home" / "auth" / "signed-out.json").is_file()
        assert _request(port, "GET", "/_stcore/metrics", headers={"Cookie": cookie})[0] == 401
        page = _page_bytes(port, xsrf, cookie)
        assert b"Sign in to see and launch studies" in page and b"Signed in as" not in page


def test_all_sessions_together_hold_a_bounded_size_of_uploads(tmp_path, provider):
    env = {"CBS_WEB_SESSION_MB": "2", "CBS_WEB_UPLOADS_MB": "3"}
    with web_signing_in(tmp_path, provider, env) as (port, secret, _):
        cookie = _signed_cookie(secret, port, "alice@lab.test")
        xsrf = _xsrf(port)
        with live_session(port, xsrf, cookie) as first, live_session(port, xsrf, cookie) as second:
            assert first != second
            assert [_upload(port, xsrf, first, f"a{i}", 900_000, cookie) for i in range(2)] == [204, 204]
            assert _upload(port, xsrf, second, "b0", 900_000, cookie) == 204  # 2.7 MB held in all
            assert _upload(port, xsrf, second, "b1", 900_000, cookie) == 503  # 3.6 MB > 3 MB
            assert _request(port, "DELETE", f"/_stcore/upload_file/{first}/a0", headers={
                "X-Xsrftoken": xsrf, "Cookie": f"_streamlit_xsrf={xsrf}; {cookie}"})[0] == 204
            assert _upload(port, xsrf, second, "b1", 900_000, cookie) == 204  # room again


#: Seconds ``cbs web`` may take to refuse its configuration and exit (it reads it before Streamlit starts).
REFUSED_WITHIN_S = 60.0


@pytest.mark.parametrize("secret", ["a long random string", "x" * 31], ids=["documented", "short"])
def test_cbs_web_does_not_start_with_a_weak_cookie_secret_so_a_cookie_forged_with_it_reaches_nothing(
        tmp_path, provider, secret):
    """Issue 41, finding 8: any ``cookie_secret`` was accepted, docs/SECURITY.md's placeholder
    included, and a cookie forged with it signed in as an admin and read ``/mlflow/``. ``cbs web``
    with such a secret, and sign-in to a real provider otherwise in order, exits naming the
    setting; nothing answers on its port, so the forged admin cookie reaches nothing."""
    port, proc = _start_web(tmp_path, provider, {"CBS_ADMINS": "admin@lab.test"}, secret)
    forged = _signed_cookie(secret, port, "admin@lab.test")
    try:
        deadline = time.monotonic() + REFUSED_WITHIN_S
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                status, _ = _request(port, "GET", "/_stcore/metrics", headers={"Cookie": forged})
            except ConnectionRefusedError:
                time.sleep(0.2)
                continue
            pytest.fail(f"cbs web serves with the cookie secret {secret!r}: a cookie forged with it as the admin got "
                        f"{status} from /_stcore/metrics (401 unsigned)")
        code = proc.poll()
    finally:
        stop_group(proc)
    said = (tmp_path / "web.log").read_text()
    assert code == 2 and "Traceback" not in said, said
    assert "[auth] cookie_secret: must be " in said and secret not in said, said  # named, never shown
    with pytest.raises(ConnectionRefusedError):
        _request(port, "GET", "/_stcore/metrics", headers={"Cookie": forged})

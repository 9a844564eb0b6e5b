"""Streamlit's side doors, closed to strangers, and one session's uploads, bounded.

Sign-in (:mod:`app.auth`) guards the script: a browser without a session gets the sign-in page.
Streamlit's other routes answer on their own: ``/_stcore/upload_file/<session>/<file>`` takes any
file for any live session id (the sign-in page's WebSocket gives one, and an XSRF pair can be made
up), ``/_stcore/metrics`` says what runs, ``/media/`` and ``/component/`` serve what pages made.
:class:`SignInGuard`, a pure ASGI middleware that ``app/server.py`` puts in front of Streamlit,
answers those routes ``401`` unless the request carries a valid sign-in cookie (checked as
Streamlit checks it, :func:`app.mlflow_proxy.signed_in_user`) whenever sign-in is configured.

Signed in or not, one session holds at most :data:`MAX_SESSION_FILES` uploaded files and
:data:`MAX_SESSION_MB` MB of them at once (``CBS_WEB_SESSION_FILES``, ``CBS_WEB_SESSION_MB``): an
upload past either gets ``413`` before its body is read; all live sessions together hold at most
:data:`MAX_TOTAL_MB` MB (``CBS_WEB_UPLOADS_MB``, else ``503``). A session that ended holds nothing. An upload needs a ``Content-Length``
(the browser always sends one), so its size is known before anything is stored.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable

#: Routes that need a signed-in session when sign-in is configured (after the base URL path).
GUARDED = ("/_stcore/upload_file/", "/_stcore/metrics", "/media/", "/component/")
UPLOAD = "/_stcore/upload_file/"
#: Uploaded files one session may hold at once.
MAX_SESSION_FILES = 8
#: Megabytes of uploads one session may hold at once (two files at Streamlit's 64 MB cap).
MAX_SESSION_MB = 128
#: Megabytes of uploads all sessions together may hold at once (``CBS_WEB_UPLOADS_MB``).
MAX_TOTAL_MB = 1024
#: Sessions whose uploads are counted (the oldest are forgotten past it; Streamlit drops a
#: session's files when it ends).
MAX_SESSIONS = 4096


def _answer(status: int, text: str):
    body = f"{status}: {text}\n".encode()

    async def send_it(send) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
    return send_it


def _limits() -> tuple[int, int, int]:
    """``(files per session, bytes per session, bytes of all sessions)`` from the environment."""
    files = int(os.environ.get("CBS_WEB_SESSION_FILES") or MAX_SESSION_FILES)
    megabytes = float(os.environ.get("CBS_WEB_SESSION_MB") or MAX_SESSION_MB)
    total = float(os.environ.get("CBS_WEB_UPLOADS_MB") or MAX_TOTAL_MB)
    return files, int(megabytes * 2**20), int(total * 2**20)


def _session_active(session: str) -> bool:
    """Whether Streamlit still keeps ``session``, connected or waiting for its browser to reconnect
    (its files go with it when it ends). Streamlit 1.67 has no public call for the second; its
    session manager's ``get_session_info`` answers both, and ``is_active_session`` stands in."""
    from streamlit import runtime

    if not runtime.exists():
        return True
    instance = runtime.get_instance()
    info = getattr(getattr(instance, "_session_mgr", None), "get_session_info", None)
    return info(session) is not None if info is not None else instance.is_active_session(session)


def _sign_in_required() -> bool:
    from app.auth import enabled

    return bool(enabled())


def _signed_in(cookies: dict[str, str], origin: str | None) -> bool:
    from app.mlflow_proxy import signed_in_user

    return signed_in_user(cookies, origin) is not None


def _cookies(scope) -> dict[str, str]:
    from http.cookies import SimpleCookie

    jar = SimpleCookie()
    for key, value in scope.get("headers", ()):
        if key == b"cookie":
            try:
                jar.load(value.decode("latin-1"))
            except Exception:  # a malformed Cookie header is no sign-in
                return {}
    return {name: morsel.value for name, morsel in jar.items()}


class SignInGuard:
    """ASGI middleware: Streamlit's uploads, metrics, media and components for signed-in sessions
    only (when sign-in is configured), and one session's uploads capped in count and bytes."""

    def __init__(self, app, *, required: Callable[[], bool] = _sign_in_required,
                 signed_in: Callable[[dict[str, str], str | None], bool] = _signed_in,
                 active: Callable[[str], bool] = _session_active):
        self.app = app
        self.required = required
        self.signed_in = signed_in
        self.active = active
        self.held: OrderedDict[str, dict[str, int]] = OrderedDict()  # session id → file id → bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = _route(scope.get("path", ""))
        if not path.startswith(GUARDED) or scope.get("method") == "OPTIONS":
            return await self.app(scope, receive, send)
        if self.required():
            headers = dict(scope.get("headers", ()))
            origin = headers.get(b"origin", b"").decode("latin-1") or None
            if not self.signed_in(_cookies(scope), origin):
                return await _answer(401, "sign in to CBS Lab first")(send)
        if path.startswith(UPLOAD) and scope.get("method") in ("PUT", "DELETE"):
            return await self._upload(path, scope, receive, send)
        return await self.app(scope, receive, send)

    async def _upload(self, path: str, scope, receive, send) -> None:
        parts = path[len(UPLOAD):].split("/")
        if len(parts) != 2 or not all(parts):
            return await _answer(404, "no such upload")(send)
        session, file_id = parts
        for ended in [k for k in self.held if k != session and not self.active(k)]:
            del self.held[ended]  # Streamlit dropped its files with it
        files = self.held.setdefault(session, {})
        self.held.move_to_end(session)
        while len(self.held) > MAX_SESSIONS:
            self.held.popitem(last=False)
        if scope["method"] == "DELETE":
            files.pop(file_id, None)
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers", ())).get(b"content-length")
        try:
            size = int(length) if length is not None else -1
        except ValueError:
            size = -1
        if size < 0:
            return await _answer(411, "an upload needs a Content-Length")(send)
        max_files, max_bytes, max_total = _limits()
        others = {k: v for k, v in files.items() if k != file_id}
        if len(others) + 1 > max_files:
            return await _answer(413, f"this session already holds {len(others)} uploaded files, the most one "
                                      f"session may (CBS_WEB_SESSION_FILES={max_files}); remove one first")(send)
        if sum(others.values()) + size > max_bytes:
            return await _answer(413, f"this session's uploads would pass {max_bytes / 2**20:g} MB "
                                      "(CBS_WEB_SESSION_MB); remove one first")(send)
        held = sum(v for k, f in self.held.items() for i, v in f.items() if (k, i) != (session, file_id))
        if held + size > max_total:
            return await _answer(503, f"the web app holds {held / 2**20:.0f} MB of uploads, near its "
                                      f"{max_total / 2**20:g} MB for all sessions (CBS_WEB_UPLOADS_MB); "
                                      "try again later")(send)
        status = 0

        async def noted(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        previous = files.get(file_id)
        files[file_id] = size  # held while it uploads, so parallel uploads count too
        try:
            await self.app(scope, receive, noted)
        finally:
            if not 200 <= status < 300:  # refused by Streamlit (no session, too large...): nothing held
                if previous is None:
                    files.pop(file_id, None)
                else:
                    files[file_id] = previous


def _route(path: str) -> str:
    """``path`` without the server's base URL path (``server.baseUrlPath``)."""
    from streamlit import config

    base = "/" + (config.get_option("server.baseUrlPath") or "").strip("/")
    return path[len(base):] if base != "/" and path.startswith(base + "/") else path

"""The Host check on every route of the web app, HTTP and WebSocket alike.

Streamlit checks ``server.allowedHosts`` on its WebSocket only: ``/``, ``/_stcore/health``,
``/_stcore/host-config``, uploads and media answered any ``Host``, so a page on another domain that
re-points its name at 127.0.0.1 (DNS rebinding) could still read them. :class:`HostCheck` is a
pure ASGI middleware that ``app/server.py`` puts in front of all of Streamlit's routes: a request
whose ``Host`` is not allowed gets ``403`` (a WebSocket is closed before it opens).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlparse

#: The body of a refused request (no page content, no hint of what the app is).
REFUSED = b"403: this host name is not served here (server.allowedHosts)\n"


def host_allowed(host: str | None, patterns: Iterable[str]) -> bool:
    """Whether a ``Host`` header value (``name[:port]``) matches one of ``patterns``: a name, an
    address, ``*.example.com`` or ``*``. A missing or malformed header never matches."""
    if not host:
        return False
    try:
        parsed = urlparse(f"//{host}")
        name = parsed.hostname
        _ = parsed.port  # a port that is not a number is malformed
    except ValueError:
        return False
    if name is None or parsed.username or parsed.password or parsed.path or parsed.query or parsed.fragment:
        return False
    name = name.lower().rstrip(".")
    for pattern in patterns:
        pattern = pattern.strip().lower().rstrip(".").strip("[]")
        if pattern == "*" or name == pattern or (pattern.startswith("*.") and name.endswith(pattern[1:])):
            return True
    return False


def allowed_patterns() -> list[str]:
    """``server.allowedHosts`` as ``cbs web`` set it (``app.cli.allowed_hosts``); loopback names when
    the option is empty (Streamlit alone would then accept any Host)."""
    from streamlit import config

    return list(config.get_option("server.allowedHosts") or ()) or ["localhost", "127.0.0.1", "::1"]


class HostCheck:
    """ASGI middleware: refuse every HTTP request and WebSocket whose Host is not allowed."""

    def __init__(self, app, patterns: Iterable[str] | None = None):
        self.app = app
        self.patterns = list(patterns) if patterns is not None else None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        host = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"), None)
        if host_allowed(host, self.patterns if self.patterns is not None else allowed_patterns()):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": 403,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                (b"content-length", str(len(REFUSED)).encode())]})
        await send({"type": "http.response.body", "body": REFUSED})

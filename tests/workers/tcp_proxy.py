"""A TCP proxy for tests: a listening address of the test's choosing, forwarded to a real service.

``tests/workers/test_outages.py`` stops and starts one in front of PostgreSQL (an outage made
safely: the shared server is never touched); ``tests/workers/test_two_hosts.py`` listens on the
root end of each network namespace's veth pair, so processes inside reach Redis and PostgreSQL.
"""

from __future__ import annotations

import socket
import threading


class Proxy:
    """A TCP proxy on ``host`` (a free port of it) to ``upstream``; ``down()`` refuses new
    connections and cuts the open ones, as a database restart does."""

    def __init__(self, upstream: tuple[str, int], host: str = "127.0.0.1"):
        self.upstream = upstream
        self.host = host
        probe = socket.socket()
        probe.bind((host, 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.server: socket.socket | None = None
        self.conns: list[socket.socket] = []

    @property
    def address(self) -> str:
        """``host:port`` of the listening end."""
        return f"{self.host}:{self.port}"

    def up(self) -> None:
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind((self.host, self.port))
        self.server.listen(64)
        threading.Thread(target=self._accept, args=(self.server,), daemon=True).start()

    def down(self) -> None:
        if self.server is not None:
            try:  # closing alone does not wake the thread blocked in accept(): the port would keep listening
                self.server.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.server.close()
            self.server = None
        for c in self.conns:
            _cut(c)
        self.conns.clear()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            _cut(s)


def _cut(s: socket.socket) -> None:
    """Shut ``s`` down, then close it. ``close()`` alone from another thread leaves a ``recv()``
    blocked on it and the connection open (the kernel keeps the socket while the call holds it):
    the upstream server then keeps its session, and a long run fills PostgreSQL's connection
    slots. ``shutdown`` wakes the blocked call and sends the peer its FIN."""
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass

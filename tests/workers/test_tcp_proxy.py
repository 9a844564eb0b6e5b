"""The tests' TCP proxy cuts a connection for both ends (tests/workers/tcp_proxy.py): an outage it
makes must end the server's session too. Closing the sockets alone left a thread blocked in
``recv()`` holding them, and PostgreSQL kept the session: the chaos run filled the shared server's
connection slots that way, twice."""

from __future__ import annotations

import time
from urllib.parse import urlparse

import pytest

from tests.workers.tcp_proxy import Proxy
from tests.workers.test_worker_process import POSTGRES_URL, missing_service


def _sessions(conn, name: str) -> int:
    with conn.cursor() as cur:
        cur.execute("select count(*) from pg_stat_activity where application_name = %s", (name,))
        return cur.fetchone()[0]


def test_a_proxy_going_down_ends_the_upstream_session():
    import psycopg2

    url = urlparse(POSTGRES_URL)
    try:
        watcher = psycopg2.connect(POSTGRES_URL, connect_timeout=5)
    except psycopg2.OperationalError as exc:
        missing_service(f"no PostgreSQL at {POSTGRES_URL}: {exc}")
    watcher.autocommit = True
    proxy = Proxy((url.hostname, url.port or 5432))
    proxy.up()
    name = f"cbs-proxy-test-{time.monotonic_ns()}"
    client = psycopg2.connect(host="127.0.0.1", port=proxy.port, user=url.username, dbname=url.path.lstrip("/"),
                              application_name=name, connect_timeout=5)
    try:
        assert _sessions(watcher, name) == 1
        proxy.down()  # the client sits idle: its pump threads are blocked in recv()
        deadline = time.monotonic() + 10
        while _sessions(watcher, name) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _sessions(watcher, name) == 0
        with pytest.raises(psycopg2.Error):
            client.cursor().execute("select 1")
    finally:
        client.close()
        watcher.close()
        proxy.down()

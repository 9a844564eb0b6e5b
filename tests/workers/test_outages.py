"""Issue 22, finding 4: processes wait out a database outage instead of crash-looping.

The outage is made safely: the processes reach PostgreSQL through a TCP proxy that this test
starts and stops (the shared server itself is never touched).
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import sqlalchemy.exc

from tests.workers.conftest import CBS, wait_for
from tests.workers.tcp_proxy import Proxy
from tests.workers.test_worker_process import POSTGRES_URL, fresh_postgres_databases
from workers.tracking import wait_out


def test_wait_out_carries_on_when_the_store_is_back_and_not_past_its_deadline():
    calls = []

    def flaky():
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("connection refused"))
        return "up"

    assert wait_out(flaky, what="test", log=lambda m: None, first_wait_s=0.01) == "up" and len(calls) == 3
    with pytest.raises(ValueError):  # not an outage: at once
        wait_out(lambda: (_ for _ in ()).throw(ValueError("a bug")), what="test", log=lambda m: None)
    t0 = time.monotonic()
    with pytest.raises(sqlalchemy.exc.OperationalError):
        wait_out(lambda: (_ for _ in ()).throw(sqlalchemy.exc.OperationalError("x", {}, Exception("down"))),
                 what="test", log=lambda m: None, first_wait_s=0.05, give_up_s=0.3)
    assert time.monotonic() - t0 < 2


@pytest.fixture
def database_behind_a_proxy(worker_env, monkeypatch):
    """A fresh PostgreSQL database (MLflow, Optuna and the ledger in it), reached through a proxy."""
    from sqlalchemy.engine import make_url

    prefixes = {"CBS_TRACKING_URI": "cbs_test_outage_mlflow", "CBS_OPTUNA_STORAGE": "cbs_test_outage_optuna"}
    with fresh_postgres_databases(prefixes) as dbs:
        url = make_url(POSTGRES_URL)
        proxy = Proxy((url.host or "127.0.0.1", url.port or 5432))
        for key, db in dbs.items():  # the ledger shares Optuna's database
            monkeypatch.setenv(key, url.set(host="127.0.0.1", port=proxy.port, database=db).render_as_string(
                hide_password=False))
        monkeypatch.setenv("CBS_OUTAGE_WAIT_S", "120")
        yield proxy
        proxy.down()


@pytest.mark.slow  # in `make test-all` (the default run stays a few minutes; docs/operating.md#tests-and-benchmarks)
@pytest.mark.services
def test_the_runner_tracking_server_and_worker_start_through_a_database_outage(database_behind_a_proxy, processes):
    proxy = database_behind_a_proxy  # down: the database is restarting
    runner = processes.start([CBS, "study", "watch", "--period", "1"], "runner")
    port = Proxy(("127.0.0.1", 1)).port
    tracking = processes.start([CBS, "tracking", "--port", str(port), "--workers", "1"], "tracking")
    worker = processes.worker("--concurrency", "1")
    for proc in (runner, tracking, worker):
        wait_for(lambda p=proc: "trying again" in processes.log(p) or p.poll() is not None, 60,
                 what=lambda p=proc: processes.log(p))
        assert proc.poll() is None, processes.log(proc)
    time.sleep(3)
    assert runner.poll() is None and tracking.poll() is None and worker.poll() is None  # waiting, not crashed
    proxy.up()  # the database is back
    wait_for(lambda: " ready." in processes.log(worker), 120, what=lambda: processes.log(worker))
    wait_for(lambda: "advancing running studies" in processes.log(runner), 90, what=lambda: processes.log(runner))
    wait_for(lambda: "MLflow UI at" in processes.log(tracking), 90, what=lambda: processes.log(tracking))
    # a minute-long outage later: the runner's passes fail and it carries on
    proxy.down()
    time.sleep(4)
    assert runner.poll() is None
    proxy.up()
    time.sleep(3)
    assert runner.poll() is None
    assert worker.poll() is None
    for proc in (runner, tracking, worker):
        os.killpg(proc.pid, signal.SIGTERM)

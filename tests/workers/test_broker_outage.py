"""Issue 22, finding 4 (the broker half): a worker and the runner wait out a Redis outage.

The outage is made safely: a private ``redis-server`` on a free port (the shared Redis is never
touched, and no other test's worker can take these messages), reached through a TCP proxy
(``tests/workers/tcp_proxy.py``) that the test stops (refusing new connections and cutting the
open ones, as a Redis restart or a network cut does) and starts again.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time

import pytest

from tests.workers.conftest import CBS, tiny_spec, wait_for
from tests.workers.tcp_proxy import Proxy
from tests.workers.test_worker_process import missing_service, no_run_left_running, study_done
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.studies.ledger import Ledger
from workers.tracking import Tracker

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def _free_port() -> int:
    """A free port below the kernel's ephemeral range: a client retrying a connection to a port in
    that range while nothing listens there can be given that very port as its own and connect to
    itself (TCP simultaneous open); the proxy could then not listen on it again."""
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    for port in random.sample(range(max(1024, low - 12000), low), 200):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


@pytest.fixture
def broker_behind_a_proxy(worker_env, monkeypatch, tmp_path):
    """A private Redis (this test's broker alone), reached through a proxy that is up."""
    import redis

    if not shutil.which(REDIS_SERVER):
        missing_service(f"no redis-server at {REDIS_SERVER} to run a private broker")
    port = _free_port()
    server = subprocess.Popen([REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: _pings(redis, port), 20, every_s=0.2, what="the private redis-server to answer")
        proxy = Proxy(("127.0.0.1", port))
        proxy.port = _free_port()  # not the probe's ephemeral one (see _free_port)
        proxy.up()
        monkeypatch.setenv("CBS_BROKER_URL", f"redis://127.0.0.1:{proxy.port}/0")
        from workers.infra.broker import reconfigure

        reconfigure()
        yield proxy
        proxy.down()
    finally:
        server.terminate()
        server.wait(timeout=10)


def _pings(redis, port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


def train_loss_steps_once_each(tracker: Tracker, run) -> list[int]:
    """The steps of the run's ``train/loss`` history, checked: every write in MLflow's raw history
    at a step of its own, and every tenth step (``log_every_steps``) there up to the last one."""
    raw = sorted(m.step for m in tracker.client.get_metric_history(run.info.run_id, "train/loss"))
    assert len(raw) == len(set(raw)), f"a step logged twice: {raw}"
    last = int(run.data.metrics["progress/step"])
    assert raw[-1] == last and set(range(10, last + 1, 10)) <= set(raw), f"a gap in {raw} (to step {last})"
    return raw


@pytest.mark.slow  # in `make test-all` (the default run stays a few minutes; docs/operating.md#tests-and-benchmarks)
@pytest.mark.services
def test_a_study_finishes_through_broker_outages_mid_trial_and_before_a_send(broker_behind_a_proxy, processes,
                                                                              token_store):
    """A worker and the runner on Redis; the worker starts while the broker is away. The broker
    goes away for 30 s while the reference trial trains (the worker's connection is cut), and
    again as the trial ends: its ack and the send of the next trial fail. The study still
    finishes: each trial ended once, at its first attempt, with one curve, and no run is left
    RUNNING. Before the fix the worker never consumed again."""
    proxy = broker_behind_a_proxy
    name = "bout"
    proxy.down()
    worker = processes.worker()
    runner = processes.start([CBS, "study", "watch", "--period", "1"], "runner")
    wait_for(lambda: "Cannot connect to redis" in processes.log(worker) or worker.poll() is not None, 90,
             what=lambda: "the worker to meet the broker away\n" + processes.log(worker))
    assert worker.poll() is None  # waiting for it, not crashed
    proxy.up()
    wait_for(lambda: " ready." in processes.log(worker), 60, what=lambda: "the worker to start\n" + processes.log(worker))
    # D = 200k: a reference run of 1,953 steps at B = 8, 40-80 s on two busy cores: longer than the
    # first outage (on a quiet machine it ends within it: both outages are one). allow_repeat: the
    # B = 16 trial's budget reads more than the store's 334k training tokens.
    api.launch_study(tiny_spec(name, batch_sizes=[8, 16], settings=[{"model": "tiny-0.1M", "tokens": 200_000}],
                               allow_repeat=True))
    s = WorkerSettings.from_env()
    tracker = Tracker(s.tracking_uri)
    ledger = Ledger(s.ledger_url)
    [first] = api.study_records(name)

    def step() -> float:
        return tracker.get_run(first.run_id).data.metrics.get("progress/step", 0)

    def logs() -> str:
        return "\n--- worker\n" + processes.log(worker)[-5000:] + "\n--- runner\n" + processes.log(runner)[-2500:]

    wait_for(lambda: step() >= 20, 120, what=lambda: "the first trial to pass step 20" + logs())
    total = int(tracker.get_run(first.run_id).data.tags["total_steps"])  # 1.25 · 200k / (8 · 16)

    def first_ended() -> bool:
        return ledger.lease(first.trial_id).state == "done"

    def outage(at_least_s: float, *, until_first_ended: bool = False) -> None:
        """The broker away for ``at_least_s`` (or until the first trial ended), and 15 s more after
        the first trial ended in it: its ack and the next trial's send fail, and the runner's passes."""
        proxy.down()  # the worker's connections are cut, new ones refused
        t0, ended_at = time.monotonic(), None
        while (time.monotonic() < t0 + at_least_s or (until_first_ended and ended_at is None)
               or (ended_at is not None and time.monotonic() < ended_at + 15)):
            if ended_at is None and first_ended():
                ended_at = time.monotonic()
            assert time.monotonic() < t0 + 120, "the first trial did not end" + logs()
            time.sleep(0.2)
        proxy.up()

    outage(30)  # mid-trial
    if not first_ended():  # the trial outlasted it
        wait_for(lambda: step() >= total - 300 or first_ended(), 180, every_s=0.2,
                 what=lambda: "the first trial to near its end" + logs())
        outage(0, until_first_ended=True)  # as the trial ends, before the next trial is sent
    status = wait_for(lambda: study_done(name), 150, every_s=1, what=lambda: f"study {name} to finish" + logs())
    assert status.n_trials == 2 and sum(status.counts.values()) == 2
    records = api.study_records(name)
    assert sorted((r.batch_size, r.attempt) for r in records) == [(8, 1), (16, 1)]  # no attempt lost
    assert all(r.status in ("finished", "reached") for r in records), records
    for record in records:
        run = tracker.get_run(record.run_id)
        assert run.info.status == "FINISHED"
        steps = train_loss_steps_once_each(tracker, run)
        if record.batch_size == 8:
            assert steps[-1] == total  # the whole reference budget
    no_run_left_running(name)
    # the paths taken: an ack that failed in an outage, and runner passes that backed off
    assert "could not acknowledge task" in processes.log(worker), logs()
    assert "or the broker is unreachable: retrying in" in processes.log(runner), logs()
    assert runner.poll() is None and worker.poll() is None


@pytest.mark.services
def test_a_late_ack_that_fails_on_a_lost_broker_frees_the_prefetch_slot(broker_behind_a_proxy):
    """The root cause, on a real Redis channel: kombu's Redis QoS keeps a message whose ack failed
    among the unacknowledged ones, so a worker at prefetch 1 never consumes again (it stops polling
    Redis, and so never sees the connection is gone). The worker's request frees the slot."""
    import redis

    import workers.trials.tasks  # noqa: F401 - registers the task the request is for
    from workers.infra.acks import LateAckRequest
    from workers.infra.broker import TRIAL_TASK, app

    proxy = broker_behind_a_proxy
    for i in (1, 2):
        app.send_task(TRIAL_TASK, args=["acks", f"unknown{i}", 1], task_id=f"unknown{i}-a1", queue="cpu",
                      routing_key="cpu")
    with app.connection_for_read() as conn:
        channel = conn.channel()
        channel.basic_qos(prefetch_count=1)

        def unacked() -> int:  # the broker's record of messages taken and not acknowledged (a new connection)
            return redis.Redis.from_url(os.environ["CBS_BROKER_URL"]).hlen(channel.unacked_key)

        def take():
            message = app.amqp.queues["cpu"](channel).get(accept=["json"])
            assert message is not None and not channel.qos.can_consume()  # the one slot is taken
            return message, LateAckRequest(message, app=app, connection_errors=conn.connection_errors)

        # away when the trial ends: kombu keeps the slot (the worker would wait forever); the request frees it
        message, request = take()
        proxy.down()
        with pytest.raises(conn.connection_errors):
            message.ack()
        assert not channel.qos.can_consume()
        request.acknowledge()  # as the worker does when the trial's task returns
        assert request.acknowledged and channel.qos.can_consume()
        proxy.up()
        assert unacked() == 1  # the message stays with the broker: it comes back after the visibility timeout
        # cut while the trial trains, back before it ends: the ack goes through (on a new connection)
        message, request = take()
        proxy.down()
        proxy.up()
        request.acknowledge()
        assert request.acknowledged and channel.qos.can_consume() and unacked() == 1


def test_watch_backs_off_while_the_broker_is_unreachable_and_keeps_its_period_after(worker_env, monkeypatch):
    """Passes that fail on an unreachable broker are tried again after doubling waits (up to 8
    periods), and at the period once one gets through."""
    from kombu.exceptions import OperationalError

    from workers.studies.runner import Runner

    runner = Runner()
    calls = []

    def advance_all(log=None):
        calls.append(1)
        if len(calls) <= 4:
            raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        return []

    monkeypatch.setattr(runner, "advance_all", advance_all)
    logs: list[str] = []
    runner.watch(period_s=0.01, passes=6, log=logs.append)
    assert len(calls) == 6
    failed = "cbs study watch: this pass failed (OperationalError: Error 111 connecting to 127.0.0.1:6379. " \
             "Connection refused.); a store or the broker is unreachable: retrying in "
    assert logs == [failed + "0.02 s", failed + "0.04 s", failed + "0.08 s", failed + "0.08 s"]


def test_a_failed_pass_lets_go_of_the_study_lock_though_another_pass_was_asked_for(worker_env, monkeypatch):
    """A trial's end-of-trial pass that fails (its send met the broker away) while the runner asked
    for the lock (marking it dirty) must not keep the lock: held, it shut every runner out of the
    study for the lock's 5 min TTL although its holder exited."""
    from kombu.exceptions import OperationalError

    from workers.studies.runner import Runner

    trial_side, runner = Runner(), Runner()
    runner.owner = "another-process"

    def failing_pass(study):
        assert not runner.ledger.try_lock(study, runner.owner, now_s=time.time(), ttl_s=300)  # busy: dirty
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(trial_side, "_advance_once", failing_pass)
    with pytest.raises(OperationalError):
        trial_side.advance("s1")
    assert runner.ledger.try_lock("s1", runner.owner, now_s=time.time(), ttl_s=300)  # free at once

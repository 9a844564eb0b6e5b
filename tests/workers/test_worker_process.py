"""Real worker processes on real brokers and stores: a whole study to a CBS, a worker killed
with SIGKILL mid-trial, Redis and PostgreSQL. Every process runs in its own process group and is
stopped by pgid at teardown (never by name)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from cbs import main as cbs_main
from tests.workers.conftest import CBS, tiny_spec, wait_for
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.studies.ledger import Ledger
from workers.tracking import Tracker


def study_done(name: str):
    status = api.study_status(name)
    return status if status.status == "done" else None


def no_run_left_running(name: str) -> None:
    s = WorkerSettings.from_env()
    tracker = Tracker(s.tracking_uri)
    parent = tracker.study_run(name)
    runs = tracker.trial_runs(parent.info.experiment_id, parent.info.run_id)
    assert [r.data.tags["trial_id"] for r in runs if r.info.status in ("RUNNING", "SCHEDULED")] == []
    assert parent.info.status == "FINISHED"


def fit_json(name: str, capsys) -> dict:
    capsys.readouterr()
    assert cbs_main(["study", "fit", name, "--json", "--bootstrap", "200"]) == 0
    return json.loads(capsys.readouterr().out)


def run_study_on_a_worker(name: str, processes, capsys, *, timeout_s: float, **changes) -> dict:
    """Launch the tiny study, let one real worker run it to the end, return ``cbs study fit --json``."""
    worker = processes.worker()
    api.launch_study(tiny_spec(name, budget_multiple=4.0, **changes))
    live = wait_for(lambda: api.alive_workers(), 60, what="the worker's presence heartbeat")
    assert live[0].queue == "cpu" and live[0].pid == worker.pid
    status = wait_for(lambda: study_done(name), timeout_s, every_s=2,
                      what=lambda: f"study {name} to finish\n" + processes.log(worker)[-3000:])
    assert status.n_trials == 4 and sum(status.counts.values()) == 4  # each trial counted once
    no_run_left_running(name)
    return fit_json(name, capsys)


def test_a_study_runs_to_a_cbs_on_a_real_worker(worker_env, processes, capsys, token_store):
    fit = run_study_on_a_worker("e2e", processes, capsys, timeout_s=240)
    [setting] = fit["settings"]
    assert setting["setting"] == "tiny-0.1M_D15K" and setting["batch_sizes"] == [4, 8, 16, 32]
    steps = setting["steps"]
    assert all(s is not None and s > 0 for s in steps[:3])
    assert steps[0] > steps[1] > steps[2]  # steps to target fall with the batch size
    assert setting["cbs"] is not None and setting["cbs"] > 8  # B* = (1 + r)·B_ref + r·B_noise > B_ref
    assert setting["cbs"] == pytest.approx(1.2 * 8 + 0.2 * setting["b_noise"], rel=1e-6)
    # The export is the table `cbs fit` reads: the same fit from the CSV.
    out = Path(worker_env["CBS_HOME"]) / "e2e.csv"
    assert cbs_main(["study", "export", "e2e", "-o", str(out)]) == 0
    capsys.readouterr()
    assert cbs_main(["fit", str(out), "--b-ref", "8", "--json", "--bootstrap", "200"]) == 0
    assert json.loads(capsys.readouterr().out)["settings"][0]["cbs"] == pytest.approx(setting["cbs"])


def test_killed_worker_trial_resumes_from_its_checkpoint(worker_env, processes, token_store):
    """SIGKILL to the worker's whole process group mid-trial; a new worker and the runner bring the
    trial back as attempt 2 from its checkpoint; it finishes once and no run stays RUNNING."""
    name = "kill"
    first = processes.worker()
    # D = 200k: a reference run of 1.25·D, 1,953 steps, long enough to be caught mid-way on a quiet machine (at 40k the
    # whole trial once ran in 2.6 s, between two polls)
    api.launch_study(tiny_spec(name, batch_sizes=[8], settings=[{"model": "tiny-0.1M", "tokens": 200_000}]))
    s = WorkerSettings.from_env()
    tracker = Tracker(s.tracking_uri)
    [record] = api.study_records(name)
    ckpt = Path(worker_env["CBS_HOME"]) / "checkpoints" / record.trial_id / "checkpoint.pt"

    ledger = Ledger(s.ledger_url)

    def progressed():  # the holder told the ledger of its checkpoint (issue 42: the loss is then free)
        run = tracker.get_run(record.run_id)
        return (ckpt.exists() and run.data.metrics.get("progress/step", 0) >= 30
                and ledger.lease(record.trial_id).checkpoint_step)
    wait_for(progressed, 120, what=lambda: "the trial to pass step 30 with a checkpoint\n" + processes.log(first)[-2000:])
    processes.kill(first, signal.SIGKILL)
    killed_at_ms = time.time() * 1000
    # Its holder is a dead process on this host: lost at once, no need to wait for staleness.
    [lost] = wait_for(lambda: [r for r in api.study_records(name) if r.status == "lost"], 10, what="lost status")
    assert lost.attempts_spent == 0  # killed from outside after a checkpoint: the attempt cap is not spent
    assert tracker.get_run(record.run_id).info.status == "RUNNING"

    processes.worker()
    processes.start([CBS, "study", "watch", "--period", "1"], "runner")
    wait_for(lambda: study_done(name), 180, every_s=2, what="the resumed trial to finish")
    [record] = api.study_records(name)
    run = tracker.get_run(record.run_id)
    assert (record.status, record.attempt, run.info.status) == ("finished", 2, "FINISHED")
    assert ledger.lease(record.trial_id).strikes == 0
    resumed = int(run.data.tags["resumed_from_step"])
    assert 0 < resumed < 1953  # from a checkpoint written before the kill, not from scratch
    after = [m.step for m in tracker.client.get_metric_history(record.run_id, "train/loss") if m.timestamp > killed_at_ms]
    assert min(after) > resumed  # the second attempt's first logged step is past the checkpoint
    steps, _ = tracker.history(run, "train/loss")
    assert steps[-1] == 1953  # one curve, to the reference budget: 1.25 · 200k / (8·16)
    # MLflow's raw history keeps every write: each step was logged exactly once across the two
    # attempts (the resumed one recomputes the steps between its checkpoint and the kill but
    # does not log them again).
    raw = [m.step for m in tracker.client.get_metric_history(record.run_id, "train/loss")]
    assert sorted(raw) == sorted(set(raw)) and len(raw) == len(steps)
    no_run_left_running(name)


@pytest.mark.slow
@pytest.mark.parametrize("whom", ["group", "parent"])
def test_warm_shutdown_checkpoints_running_trials_back_to_the_queue(worker_env, processes, token_store, whom):
    """SIGTERM mid-trial, to the worker's process group (Ctrl-C, a supervisor stopping the group:
    the child's handler) or to its parent only (``kill PID``: the parent's shutdown hook asks the
    trial through the ledger). The trial stops at a checkpoint, the same attempt goes back in the
    queue, the worker exits in seconds, and the next worker resumes it exactly there."""
    name = "warm"
    first = processes.worker()
    api.launch_study(tiny_spec(name, batch_sizes=[8], settings=[{"model": "tiny-0.1M", "tokens": 200_000}]))
    s = WorkerSettings.from_env()
    tracker = Tracker(s.tracking_uri)
    [record] = api.study_records(name)
    wait_for(lambda: tracker.get_run(record.run_id).data.metrics.get("progress/step", 0) >= 20, 120,
             what=lambda: "the trial to pass step 20\n" + processes.log(first)[-2000:])
    (os.killpg if whom == "group" else os.kill)(first.pid, signal.SIGTERM)
    first.wait(timeout=30)  # a warm shutdown that does not wait for the trial to end
    [queued] = api.study_records(name)
    run = tracker.get_run(record.run_id)
    assert (queued.status, queued.attempt, run.info.status) == ("queued", 1, "SCHEDULED")
    stopped_at = int(run.data.tags["interrupted_at_step"])
    assert 20 <= stopped_at < 1953  # the reference budget 1.25 · 200k tokens / (8·16) = 1,953 steps
    processes.worker()
    wait_for(lambda: study_done(name), 120, every_s=1, what="the interrupted trial to finish on a new worker")
    [record] = api.study_records(name)
    run = tracker.get_run(record.run_id)
    assert (record.status, record.attempt, run.info.status) == ("finished", 1, "FINISHED")
    assert int(run.data.tags["resumed_from_step"]) == stopped_at  # the checkpoint written at the stop
    no_run_left_running(name)


@pytest.mark.slow
def test_a_killed_child_is_redelivered_by_celery_and_resumes(worker_env, processes, token_store):
    """SIGKILL to the trial's child only (an OOM kill): Celery requeues the message
    (task_reject_on_worker_lost), a new child takes the trial over as attempt 2 from its
    checkpoint, with no runner process involved."""
    from workers.studies.ledger import Ledger

    name = "child"
    worker = processes.worker()
    api.launch_study(tiny_spec(name, batch_sizes=[8], settings=[{"model": "tiny-0.1M", "tokens": 200_000}]))
    s = WorkerSettings.from_env()
    tracker, ledger = Tracker(s.tracking_uri), Ledger(s.ledger_url)
    [record] = api.study_records(name)
    ckpt = Path(worker_env["CBS_HOME"]) / "checkpoints" / record.trial_id / "checkpoint.pt"
    wait_for(lambda: ckpt.exists() and tracker.get_run(record.run_id).data.metrics.get("progress/step", 0) >= 30,
             120, what=lambda: "a checkpoint past step 30\n" + processes.log(worker)[-2000:])
    child_pid = int(ledger.lease(record.trial_id).owner.rsplit(":", 1)[1])
    assert child_pid != worker.pid
    os.kill(child_pid, signal.SIGKILL)
    wait_for(lambda: study_done(name), 120, every_s=1, what=lambda: "the redelivered trial\n" + processes.log(worker)[-3000:])
    [record] = api.study_records(name)
    run = tracker.get_run(record.run_id)
    assert (record.status, record.attempt, run.info.status) == ("finished", 2, "FINISHED")
    assert int(run.data.tags["resumed_from_step"]) > 0
    assert "WorkerLostError" in processes.log(worker) or "exited with 'signal 9" in processes.log(worker)
    no_run_left_running(name)


def test_worker_forks_a_child_per_task_while_its_presence_thread_writes(worker_env, processes, monkeypatch):
    """The pool forks a fresh child after every task while the parent's presence thread writes
    SQLite; a fork inside a write used to leave the child blocked on a lock (5 of 40 ran). Tasks
    of unknown trials also show that a task without a lease exits without training."""
    from workers.infra.broker import TRIAL_TASK, app

    monkeypatch.setenv("CBS_HEARTBEAT_S", "0.01")
    monkeypatch.setenv("CBS_STALE_AFTER_S", "1")
    n = 8
    for i in range(n):
        app.send_task(TRIAL_TASK, args=["x", f"unknown{i}", 1], task_id=f"unknown{i}-a1", queue="cpu")
    worker = processes.worker()
    wait_for(lambda: processes.log(worker).count("succeeded") >= n, 120,
             what=lambda: "every task to run\n" + processes.log(worker)[-2000:])
    assert processes.log(worker).count("'skipped': 'no lease (unknown trial)'") == n


def _descendants(pid: int) -> dict[int, int]:
    """``{pid: parent pid}`` of every live process below ``pid`` (read from /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    below, frontier = {}, [pid]
    while frontier:
        top = frontier.pop()
        for child, parent in parents.items():
            if parent == top and child not in below:
                below[child] = parent
                frontier.append(child)
    return below


def test_idle_pool_children_killed_on_the_filesystem_broker_leave_a_worker_that_takes_tasks(worker_env, processes):
    """billiard's blocking pool (no event loop: the filesystem broker) let an idle child hold the task
    pipe's read lock while it waited; a ``kill -9`` of that child left the lock held and the worker
    taking no task ever again (the chaos run's fault). workers.infra.pool waits without the lock."""
    from workers.infra.broker import TRIAL_TASK, app

    worker = processes.worker("--concurrency", "2")

    def pool_children() -> list[int]:  # `cbs worker` execs Celery: its pool children are the worker's own
        return sorted(pid for pid, parent in _descendants(worker.pid).items() if parent == worker.pid)

    wait_for(lambda: "ready" in processes.log(worker) and len(pool_children()) == 2, 60,
             what=lambda: "two idle pool children\n" + processes.log(worker)[-2000:])
    time.sleep(2.0)  # both blocked waiting for a task (one of them, before, inside the lock)
    idle = pool_children()
    for pid in idle:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: len(set(pool_children()) - set(idle)) == 2, 60,
             what=lambda: "the pool to replace its children\n" + processes.log(worker)[-2000:])
    n = 4
    for i in range(n):
        app.send_task(TRIAL_TASK, args=["x", f"after-kill{i}", 1], task_id=f"after-kill{i}-a1", queue="cpu")
    wait_for(lambda: processes.log(worker).count("'skipped': 'no lease (unknown trial)'") >= n, 90,
             what=lambda: "every task after the kill to run\n" + processes.log(worker)[-2000:])


# ---------------------------------------------------------------------------- services
REDIS_URL = os.environ.get("CBS_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
POSTGRES_URL = os.environ.get("CBS_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def services_required() -> bool:
    """``CBS_REQUIRE_SERVICES=1`` (set by ``.ci/run``): a Redis or PostgreSQL that does not answer
    fails the test instead of skipping it, so CI cannot pass without touching them. A laptop
    without them (the variable unset) skips with the reason."""
    return os.environ.get("CBS_REQUIRE_SERVICES", "") not in ("", "0")


def missing_service(what: str) -> None:
    if services_required():
        pytest.fail(f"{what} (CBS_REQUIRE_SERVICES is set: the services must answer)")
    pytest.skip(what)


@contextlib.contextmanager
def fresh_postgres_databases(prefixes: dict[str, str]):
    """``{key: database}``: one new PostgreSQL database per prefix (a random suffix), dropped on exit;
    the test skips (or fails under ``CBS_REQUIRE_SERVICES``) where no PostgreSQL answers."""
    import psycopg2

    try:
        admin = psycopg2.connect(POSTGRES_URL, connect_timeout=2)
    except Exception as exc:  # any failure means: no PostgreSQL here
        missing_service(f"no PostgreSQL answers at {POSTGRES_URL} ({type(exc).__name__})")
    admin.autocommit = True
    tag = uuid.uuid4().hex[:8]
    dbs = {key: f"{prefix}_{tag}" for key, prefix in prefixes.items()}
    with admin.cursor() as cur:
        for db in dbs.values():
            cur.execute(f'CREATE DATABASE "{db}"')
    try:
        yield dbs
    finally:
        with admin.cursor() as cur:
            for db in dbs.values():
                cur.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.close()


def redis_or_skip() -> None:
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
    except Exception as exc:  # any failure means: no Redis here
        missing_service(f"no Redis answers at {REDIS_URL} ({type(exc).__name__})")


@pytest.fixture
def redis_env(worker_env, monkeypatch):
    redis_or_skip()
    monkeypatch.setenv("CBS_BROKER_URL", REDIS_URL)
    from workers.infra.broker import app, reconfigure

    reconfigure()
    with app.connection_for_write() as conn:  # messages a previous run left in the test database
        conn.default_channel.queue_purge("cpu")
    yield worker_env


@pytest.mark.services
def test_a_trial_runs_through_redis(redis_env, processes, token_store):
    processes.worker()
    api.launch_study(tiny_spec("redis1", batch_sizes=[8]))
    wait_for(lambda: study_done("redis1"), 120, every_s=1, what="the trial to run through Redis")
    [record] = api.study_records("redis1")
    assert (record.status, record.attempt) == ("finished", 1)
    no_run_left_running("redis1")


@pytest.mark.services
@pytest.mark.slow
def test_a_study_runs_to_a_cbs_through_redis(redis_env, processes, capsys, token_store):
    fit = run_study_on_a_worker("redis2", processes, capsys, timeout_s=300)
    assert fit["settings"][0]["cbs"] is not None


@pytest.fixture
def postgres_env(worker_env, monkeypatch):
    """MLflow in one fresh PostgreSQL database, Optuna and the ledger in another (dropped afterwards).

    Two databases: MLflow and Optuna each keep their schema version in ``alembic_version``.
    """
    with fresh_postgres_databases({"mlflow": "cbs_test_mlflow", "optuna": "cbs_test_optuna"}) as dbs:
        urls = {k: POSTGRES_URL.rsplit("/", 1)[0] + f"/{db}" for k, db in dbs.items()}
        monkeypatch.setenv("CBS_TRACKING_URI", urls["mlflow"])
        monkeypatch.setenv("CBS_OPTUNA_STORAGE", urls["optuna"])
        yield urls


@pytest.mark.services
def test_processes_starting_together_on_fresh_postgresql_databases_all_start(postgres_env, tmp_path):
    """``cbs up`` on PostgreSQL starts the tracking server, the worker, the runner and the CLI at
    once; each creates MLflow's, Optuna's and the ledger's tables on first use. Unserialised, all
    but one died in ``CREATE TABLE alembic_version`` (seen in the chaos run)."""
    import subprocess
    import sys

    code = ("from workers.infra.settings import WorkerSettings; from workers.tracking import Tracker; "
            "from workers.studies.ledger import Ledger; from workers.studies.search import storage; "
            "s = WorkerSettings.from_env(); Tracker(s.tracking_uri).studies(); Ledger(s.ledger_url).leases('x'); "
            "storage(s.optuna_storage); print('ok')")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, cwd=Path(__file__).parents[2]) for _ in range(4)]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, "\n---\n".join(o[-1500:] for o in outputs)


@pytest.mark.slow  # in `make test-all` (the default run stays a few minutes; docs/operating.md#tests-and-benchmarks)
@pytest.mark.services
def test_sigterm_on_redis_and_postgresql_puts_the_trial_back_and_it_resumes(redis_env, postgres_env, processes,
                                                                              token_store):
    """The scale-out path in the default run: broker on Redis, MLflow, Optuna and the ledger on
    PostgreSQL. SIGTERM to the worker's group mid-trial: the trial stops at a checkpoint, the same
    attempt goes back through Redis, and a new worker resumes it exactly there (issue 12, item 16)."""
    from workers.tracking import prepare_store

    s = WorkerSettings.from_env()
    assert s.broker_url.startswith("redis://") and s.tracking_uri.startswith("postgresql")
    assert s.ledger_url.startswith("postgresql")
    prepare_store(s.tracking_uri)
    first = processes.worker()
    name = "pgterm"
    api.launch_study(tiny_spec(name, batch_sizes=[8], settings=[{"model": "tiny-0.1M", "tokens": 200_000}]))
    tracker = Tracker(s.tracking_uri)
    [record] = api.study_records(name)
    wait_for(lambda: tracker.get_run(record.run_id).data.metrics.get("progress/step", 0) >= 20, 120,
             what=lambda: "the trial to pass step 20\n" + processes.log(first)[-2000:])
    os.killpg(first.pid, signal.SIGTERM)
    first.wait(timeout=30)
    [queued] = api.study_records(name)
    run = tracker.get_run(record.run_id)
    assert (queued.status, queued.attempt, run.info.status) == ("queued", 1, "SCHEDULED")
    stopped_at = int(run.data.tags["interrupted_at_step"])
    processes.worker()
    wait_for(lambda: study_done(name), 150, every_s=1, what="the interrupted trial to finish on a new worker")
    [record] = api.study_records(name)
    run = tracker.get_run(record.run_id)
    assert (record.status, record.attempt, run.info.status) == ("finished", 1, "FINISHED")
    assert int(run.data.tags["resumed_from_step"]) == stopped_at
    no_run_left_running(name)


@pytest.mark.services
@pytest.mark.slow
def test_an_optuna_study_runs_on_postgresql(postgres_env, processes, token_store):
    """Two Optuna-proposed reference trials at once (--concurrency 2); MLflow, Optuna and the ledger
    all in PostgreSQL; optuna-dashboard could open the same storage."""
    import optuna

    from workers.tracking import prepare_store

    s = WorkerSettings.from_env()
    prepare_store(s.tracking_uri)  # MLflow's schema before two children race to create it
    processes.worker("--concurrency", "2")
    name = "pg1"
    api.launch_study(tiny_spec(name, batch_sizes=[8],
                               search={"kind": "optuna", "n_trials": 2, "parallel_per_cell": 2,
                                       "lr_min": 3e-3, "lr_max": 3e-2}))
    wait_for(lambda: study_done(name), 180, every_s=2, what="the Optuna study to finish on PostgreSQL")
    records = api.study_records(name)
    assert sorted((r.status, r.search_number) for r in records) == [("finished", 0), ("finished", 1)]
    assert s.tracking_uri.startswith("postgresql") and s.ledger_url == s.optuna_storage
    study = optuna.load_study(storage=s.optuna_storage, study_name=f"{name}/tiny-0.1M_D15K.b8")
    trials = sorted(study.get_trials(), key=lambda t: t.number)
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    # Reference cells tell their final held-out loss (workers/studies/search.py); the lr matches the run's.
    by_number = {r.search_number: r for r in records}
    for t in trials:
        assert t.value == pytest.approx(by_number[t.number].final_eval_loss)
        assert t.params["lr"] == pytest.approx(by_number[t.number].lr)
    no_run_left_running(name)

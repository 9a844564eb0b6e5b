"""Issue 12: the holes that lost data or stopped the lab, each closed and checked here.

* a tracking-store outage (even at the final summary) gives the attempt back, and the next
  attempt returns the result its checkpoint holds;
* a lost trial of a cancelled study and a run left open after its lease ended are repaired;
* every terminal transition removes the checkpoint, and a superseded holder never writes one;
* the hard time limit ends the trial ``failed`` instead of looking like a lost worker;
* the study lock is renewed while a pass runs.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE, TEMPORARILY_UNAVAILABLE

from mlflow import MlflowClient
from tests.workers.conftest import tiny_spec, wait_for
from tests.workers.test_runner import dead_owner
from workers.infra.checkpoints import checkpoint_dir
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.studies.ledger import Ledger, this_process
from workers.studies.runner import AdvanceReport, Runner
from workers.tracking import Tracker, is_transient


def outage(message: str = "the tracking server is restarting") -> MlflowException:
    return MlflowException(message, error_code=TEMPORARILY_UNAVAILABLE)


def test_transient_errors_are_told_from_wrong_requests():
    import sqlalchemy.exc

    assert is_transient(outage())
    assert is_transient(sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("server closed the connection")))
    wrapped = MlflowException("API request failed")
    wrapped.__cause__ = ConnectionRefusedError(111, "Connection refused")
    assert is_transient(wrapped)
    assert not is_transient(MlflowException("Param value too long", error_code=INVALID_PARAMETER_VALUE))
    assert not is_transient(ValueError("a bug"))


def test_a_store_outage_at_the_final_flush_gives_the_attempt_back(worker_env, token_store, monkeypatch):
    """Item 2: the summary cannot be written after training ended. Today's code marked the trial
    failed for good; now the same attempt goes back to the queue and the next one returns the
    result the checkpoint holds, without training again."""
    from workers.trials.trial import run_trial_attempt

    monkeypatch.setenv("CBS_TRACKING_RETRIES", "2")
    api.launch_study(tiny_spec("out1", batch_sizes=[8]))
    [record] = api.study_records("out1")
    tid = record.trial_id
    s = WorkerSettings.from_env()
    ledger, tracker = Ledger(s.ledger_url), Tracker(s.tracking_uri)
    real = MlflowClient.log_batch
    failures = []

    def down_for_summaries(self, run_id, metrics=(), params=(), tags=(), **kw):
        if any(m.key.startswith("summary/") for m in metrics):
            failures.append(1)
            raise outage()
        return real(self, run_id, metrics=metrics, params=params, tags=tags, **kw)

    monkeypatch.setattr(MlflowClient, "log_batch", down_for_summaries)
    out = run_trial_attempt("out1", tid, 1, worker="test")
    assert "store unreachable" in out["requeued"] and len(failures) >= 2  # retried (CBS_TRACKING_RETRIES=2)
    lease = ledger.lease(tid)
    assert (lease.state, lease.attempt, lease.outcome) == ("queued", 1, None)  # no attempt spent
    assert (Path(checkpoint_dir(tid)) / "checkpoint.pt").exists()  # it holds the result
    run = tracker.get_run(record.run_id)
    assert run.info.status == "SCHEDULED" and "the tracking server is restarting" in run.data.tags["given_back"]

    monkeypatch.setattr(MlflowClient, "log_batch", real)  # the store is back
    again = run_trial_attempt("out1", tid, 1, worker="test")
    assert (again["outcome"], again["attempt"], again["steps"]) == ("finished", 1, out_steps(tracker, record))
    run = tracker.get_run(record.run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["summary/steps"] == again["steps"]
    assert not Path(checkpoint_dir(tid)).exists()


def out_steps(tracker: Tracker, record) -> int:
    """The steps the first attempt trained (its last logged progress)."""
    return int(tracker.get_run(record.run_id).data.metrics["progress/step"])


def test_a_store_outage_before_training_costs_no_attempt(worker_env, monkeypatch):
    """Item 2: an error before training used to leave a lease that looked lost and burned every
    attempt in seconds."""
    from workers.trials.trial import run_trial_attempt

    monkeypatch.setenv("CBS_TRACKING_RETRIES", "1")
    api.launch_study(tiny_spec("out2", batch_sizes=[8]))
    [record] = api.study_records("out2")

    def down(self, run_id):
        raise outage()

    monkeypatch.setattr(MlflowClient, "get_run", down)
    out = run_trial_attempt("out2", record.trial_id, 1, worker="test")
    assert "store unreachable" in out["requeued"]
    lease = Ledger(WorkerSettings.from_env().ledger_url).lease(record.trial_id)
    assert (lease.state, lease.attempt) == ("queued", 1)


def test_a_lost_trial_of_a_cancelled_study_ends_and_its_run_with_it(worker_env):
    """Item 4: the repair pass skipped studies that were not running, so such a run stayed
    RUNNING forever; likewise a run whose lease ended just before its process died."""
    api.launch_study(tiny_spec("can1", batch_sizes=[8, 16]))
    s = WorkerSettings.from_env()
    ledger, tracker, runner = Ledger(s.ledger_url), Tracker(s.tracking_uri), Runner(s)
    [record] = api.study_records("can1")
    assert ledger.claim(record.trial_id, 1, owner=dead_owner(), worker="cpu@x", now_s=time.time())
    tracker.set_trial_status(record.run_id, "running", attempt=1)
    Path(checkpoint_dir(record.trial_id)).mkdir(parents=True)
    api.cancel_study("can1")  # asks the (dead) holder to stop: nobody ever answers
    assert tracker.get_run(record.run_id).info.status == "RUNNING"
    reports = runner.advance_all()
    assert [r.repaired for r in reports if r.study == "can1"] == [(record.trial_id,)]
    run = tracker.get_run(record.run_id)
    assert (run.info.status, run.data.tags["outcome"]) == ("KILLED", "stopped")
    assert ledger.lease(record.trial_id).state == "done"
    assert not Path(checkpoint_dir(record.trial_id)).exists()
    assert [r.repaired for r in runner.advance_all() if r.study == "can1"] == []  # nothing left to do


def test_a_run_left_open_after_its_lease_ended_is_closed_in_an_ended_study(worker_env):
    api.launch_study(tiny_spec("can2", batch_sizes=[8]))
    s = WorkerSettings.from_env()
    ledger, tracker = Ledger(s.ledger_url), Tracker(s.tracking_uri)
    [record] = api.study_records("can2")
    owner = this_process()
    assert ledger.claim(record.trial_id, 1, owner=owner, worker="cpu@x", now_s=time.time())
    tracker.set_trial_status(record.run_id, "running", attempt=1)
    tracker.set_study_status(tracker.study_run("can2").info.run_id, "cancelled", end="KILLED")
    assert ledger.finish(record.trial_id, 1, owner=owner, outcome="stopped", now_s=time.time())
    # ... and the process died here, before ending the run.
    assert Runner(s).repair_ended("can2") == [record.trial_id]
    assert tracker.get_run(record.run_id).info.status == "KILLED"


def test_every_end_removes_the_checkpoint(worker_env, monkeypatch):
    """Item 6: a trial failed at the attempt cap, and any ended trial whose folder came back (a
    superseded holder's late write), lose their checkpoint folder on the runner's next pass."""
    monkeypatch.setenv("CBS_MAX_ATTEMPTS", "1")
    api.launch_study(tiny_spec("ck1", batch_sizes=[8]))
    s = WorkerSettings.from_env()
    ledger, runner = Ledger(s.ledger_url), Runner(s)
    [record] = api.study_records("ck1")
    folder = Path(checkpoint_dir(record.trial_id))
    folder.mkdir(parents=True)
    (folder / "checkpoint.pt").write_bytes(b"x" * 10)
    assert ledger.claim(record.trial_id, 1, owner=dead_owner(), worker="cpu@x", now_s=time.time())
    assert runner.advance("ck1").failed == (record.trial_id,)
    assert not folder.exists()
    folder.mkdir(parents=True)  # written again by a holder that had not yet seen it was superseded
    (folder / "checkpoint.pt.tmp").write_bytes(b"x")
    api.launch_study(tiny_spec("ck1", batch_sizes=[8]))  # any later pass of the study sweeps it
    runner.advance("ck1")
    assert not folder.exists()


def test_a_superseded_holder_never_writes_a_checkpoint(worker_env, token_store, monkeypatch):
    """Item 6: the runner gives the trial to a new attempt and the new holder removes the folder;
    the old holder, still training, must not write into it again (today's trainer did, at its
    next periodic save and again when it stopped)."""
    from workers.trials.trial import run_trial_attempt

    monkeypatch.setenv("CBS_CHECKPOINT_EVERY_S", "0.001")  # a checkpoint at every log step
    monkeypatch.setenv("CBS_HEARTBEAT_S", "30")  # the old holder learns it only when it asks
    monkeypatch.setenv("CBS_STALE_AFTER_S", "90")
    api.launch_study(tiny_spec("sup1", batch_sizes=[8], settings=[{"model": "tiny-0.1M", "tokens": 200_000}]))
    [record] = api.study_records("sup1")
    tid = record.trial_id
    folder = Path(checkpoint_dir(tid))
    ledger = Ledger(WorkerSettings.from_env().ledger_url)
    result: dict = {}
    holder = threading.Thread(target=lambda: result.update(run_trial_attempt("sup1", tid, 1, worker="old")))
    holder.start()
    wait_for(lambda: (folder / "checkpoint.pt").exists(), 60, every_s=0.05, what="the first checkpoint")
    # The runner judged it lost (as after a network partition) and attempt 2 took the trial.
    assert ledger.requeue(tid, 1, now_s=time.time(), stale_before_s=time.time() + 1e6)
    assert ledger.claim(tid, 2, owner="elsewhere:1", worker="new", now_s=time.time())
    import shutil

    shutil.rmtree(folder)
    holder.join(timeout=120)
    assert result["skipped"] == "superseded by a newer attempt"
    assert not folder.exists()


@pytest.mark.slow  # in `make test-all` (the default run stays a few minutes; docs/operating.md#tests-and-benchmarks)
def test_the_hard_time_limit_ends_the_trial_failed_not_lost(worker_env, processes, token_store, monkeypatch):
    """Item 7: Celery kills the child at the hard limit; the trial used to come back as a lost
    worker up to the attempt cap. Now it ends ``failed`` at attempt 1 with the reason."""
    monkeypatch.setenv("CBS_TRIAL_TIME_LIMIT_S", "6")
    processes.worker()
    processes.start([str(Path(__import__("sys").executable).parent / "cbs"), "study", "watch", "--period", "1"],
                    "runner")
    api.launch_study(tiny_spec("tl1", batch_sizes=[8], allow_repeat=True,
                               settings=[{"model": "tiny-0.1M", "tokens": 3_000_000}]))
    s = WorkerSettings.from_env()
    tracker = Tracker(s.tracking_uri)

    def ended():
        [record] = api.study_records("tl1")
        return record if record.status == "failed" else None

    record = wait_for(ended, 90, what="the trial to end at its time limit")
    time.sleep(8)  # longer than CBS_STALE_AFTER_S: a lost trial would have been requeued by now
    [record] = api.study_records("tl1")
    run = tracker.get_run(record.run_id)
    assert (record.status, record.attempt, run.info.status) == ("failed", 1, "FAILED")
    assert run.data.tags["stop_reason"] == "exceeded the hard time limit of 6 s (CBS_TRIAL_TIME_LIMIT_S)"
    assert not Path(checkpoint_dir(record.trial_id)).exists()


def test_the_study_lock_is_renewed_while_a_long_pass_runs(worker_env, monkeypatch):
    """Item 8: a pass longer than the lock's TTL let a second runner in beside it.

    The other runner asks at an explicit instant, two TTLs after the pass began (past the first
    hold), once the keeper has had time to renew: wall-clock asks raced the keeper's renewals on
    a loaded CI host (one sqlite write over 0.4 s let the lock lapse).
    """
    import sqlalchemy as sa

    from workers.studies.ledger import LOCKS

    s = WorkerSettings.from_env()
    runner = Runner(s)
    ttl = runner.lock_ttl_s = 0.6
    other = Ledger(s.ledger_url)
    seen: list[bool] = []

    def held_until() -> float:
        with other.engine.begin() as conn:
            return conn.execute(sa.select(LOCKS.c.until_s).where(LOCKS.c.study == "long")).scalar_one()

    def slow_pass(study):
        if seen:  # the refused ask below marked the study dirty: the runner passes once more
            return AdvanceReport(study=study)
        deadline = time.time() + 60
        while held_until() <= started + 2.5 * ttl and time.time() < deadline:
            time.sleep(0.05)
        seen.append(other.try_lock("long", "another-runner:1", now_s=started + 2 * ttl, ttl_s=ttl))
        return AdvanceReport(study=study)

    monkeypatch.setattr(runner, "_advance_once", slow_pass)
    started = time.time()
    runner.advance("long")
    assert seen == [False]  # renewed past its first TTL: the second runner was kept out
    assert other.try_lock("long", "another-runner:1", now_s=time.time(), ttl_s=ttl)  # released at the end

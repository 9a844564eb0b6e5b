"""Issue 22, finding 3: ordered endings.

* the MLflow run ends with all its tags before the ledger calls the trial done; a run that
  cannot be ended gives the attempt back and the next attempt ends it from its checkpoint;
* the repair pass restores the full tag set from the checkpoint (the steps table's columns);
* Optuna is told of every ending, a cancel included;
* fencing fails closed: a holder that cannot reach the ledger writes no checkpoint, and past
  its deadline stops and gives the attempt back (issue 42: never lost).
"""

from __future__ import annotations

import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy.exc
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import TEMPORARILY_UNAVAILABLE

from mlflow import MlflowClient
from tests.workers.conftest import tiny_spec
from workers.infra.checkpoints import checkpoint_dir
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.studies.ledger import Ledger
from workers.studies.runner import Runner
from workers.tracking import Tracker

#: Tags an ended run carries from its trial's result.
RESULT_TAGS = ("beta2", "ewa_taus", "target_tau", "steps_to_target", "stop_reason")


def launch(name: str, **changes):
    api.launch_study(tiny_spec(name, **changes))
    return sorted(api.study_records(name), key=lambda r: r.batch_size)


def test_the_run_ends_with_its_tags_before_the_ledger_calls_the_trial_done(worker_env, token_store, monkeypatch):
    from workers.trials.trial import run_trial_attempt

    [record] = launch("end1", batch_sizes=[8])
    tracker = Tracker(WorkerSettings.from_env().tracking_uri)
    seen = {}
    real = Ledger.finish

    def finish(self, trial_id, attempt, **kw):
        run = tracker.get_run(record.run_id)
        seen.update(status=run.info.status, tags=dict(run.data.tags))
        return real(self, trial_id, attempt, **kw)

    monkeypatch.setattr(Ledger, "finish", finish)
    out = run_trial_attempt("end1", record.trial_id, 1, worker="test")
    assert out["outcome"] == "finished"
    assert seen["status"] == "FINISHED" and seen["tags"]["status"] == "finished"
    assert set(RESULT_TAGS) <= set(seen["tags"]) and seen["tags"]["ewa_taus"].startswith("[")


def test_a_run_that_cannot_be_ended_is_ended_by_the_next_attempt(worker_env, token_store, monkeypatch):
    from workers.trials.trial import run_trial_attempt

    monkeypatch.setenv("CBS_TRACKING_RETRIES", "1")
    [record] = launch("end2", batch_sizes=[8])
    s = WorkerSettings.from_env()
    ledger, tracker = Ledger(s.ledger_url), Tracker(s.tracking_uri)
    real = MlflowClient.set_terminated

    def down(self, run_id, *args, **kwargs):
        raise MlflowException("the database is restarting", error_code=TEMPORARILY_UNAVAILABLE)

    with pytest.MonkeyPatch.context() as outage:
        outage.setattr(MlflowClient, "set_terminated", down)
        out = run_trial_attempt("end2", record.trial_id, 1, worker="test")
    assert "store unreachable" in out["requeued"]
    lease = ledger.lease(record.trial_id)
    assert (lease.state, lease.attempt) == ("queued", 1)  # not done while the run is open
    assert (Path(checkpoint_dir(record.trial_id)) / "checkpoint.pt").exists()
    assert MlflowClient.set_terminated is real
    again = run_trial_attempt("end2", record.trial_id, 1, worker="test")
    assert again["outcome"] == "finished" and again["resumed_from_step"] is None  # from the result
    run = tracker.get_run(record.run_id)
    assert run.info.status == "FINISHED" and set(RESULT_TAGS) <= set(run.data.tags)
    assert ledger.lease(record.trial_id).state == "done" and not Path(checkpoint_dir(record.trial_id)).exists()


def test_the_repair_restores_the_full_tag_set_from_the_checkpoint(worker_env, token_store, monkeypatch):
    """A run left open after its lease ended (a crash between them in an older lab, or a runner
    ending): the repair ends it with the tags the steps table reads, not the outcome alone."""
    from workers.trials.trial import run_trial_attempt

    monkeypatch.setenv("CBS_KEEP_CHECKPOINTS", "1")  # the checkpoint with the result stays, as after a crash
    record = launch("end3", batch_sizes=[8, 16])[0]  # the reference first; B = 16 keeps the study running
    s = WorkerSettings.from_env()
    tracker = Tracker(s.tracking_uri)
    assert run_trial_attempt("end3", record.trial_id, 1, worker="test")["outcome"] == "finished"
    want = {k: tracker.get_run(record.run_id).data.tags[k] for k in RESULT_TAGS}
    for key in (*RESULT_TAGS, "outcome"):
        tracker.client.delete_tag(record.run_id, key)
    tracker.set_trial_status(record.run_id, "running")
    assert tracker.get_run(record.run_id).info.status == "RUNNING"

    report = Runner(s).advance("end3")
    assert record.trial_id in report.repaired
    run = tracker.get_run(record.run_id)
    assert run.info.status == "FINISHED" and {k: run.data.tags.get(k) for k in RESULT_TAGS} == want


def test_optuna_is_told_of_a_cancel(worker_env):
    launch("end4", batch_sizes=[8], search={"kind": "optuna", "n_trials": 2, "parallel_per_cell": 2,
                                             "lr_min": 3e-3, "lr_max": 3e-2})
    s = WorkerSettings.from_env()
    records = api.study_records("end4")
    assert len(records) == 2 and all(r.search_number is not None for r in records)
    runner = Runner(s)
    assert runner.cancel_trial(records[0].trial_id) == "stopped"
    runner.cancel_study("end4")
    study = optuna.load_study(storage=s.optuna_storage, study_name=f"end4/{records[0].cell_id}")
    assert [t.state.name for t in study.get_trials()] == ["FAIL", "FAIL"]  # none left RUNNING


class Unreachable:
    """A ledger whose database is gone (the boundary: a real outage cannot be timed here)."""

    def beat(self, *args, **kwargs):
        raise sqlalchemy.exc.OperationalError("UPDATE cbs_trial_leases", {}, Exception("could not connect"))


def test_a_holder_cut_off_from_the_ledger_stops_writing_and_gives_up():
    from workers.trials.trial import Heartbeat, StopWatch

    heartbeat = Heartbeat(Unreachable(), "t", 1, "me", period_s=0.05, deadline_s=0.3)
    watch = StopWatch(heartbeat)
    assert watch.may_checkpoint(None) is False  # fails closed: no checkpoint it cannot vouch for
    assert not heartbeat.superseded  # a short outage is waited out ...
    time.sleep(0.35)
    heartbeat.beat()
    assert heartbeat.superseded  # ... a long one ends this attempt

    class State:
        stop_reason = None

        def request_stop(self, reason):
            self.stop_reason = reason

    state = State()
    watch.post_step(state, None)
    assert state.stop_reason == "superseded"


def test_a_trial_cut_off_from_the_ledger_writes_no_checkpoint_after_its_deadline(worker_env, token_store,
                                                                                monkeypatch):
    from workers.trials.trial import run_trial_attempt

    monkeypatch.setenv("CBS_CHECKPOINT_EVERY_S", "0.001")  # a checkpoint asked at every log step
    [record] = launch("end5", batch_sizes=[8], settings=[{"model": "tiny-0.1M", "tokens": 200_000}])
    folder = Path(checkpoint_dir(record.trial_id)) / "checkpoint.pt"
    real = Ledger.beat
    cut = {}

    def beat(self, *args, **kwargs):
        if folder.exists():
            cut.setdefault("at", folder.stat().st_mtime_ns)
            raise sqlalchemy.exc.OperationalError("UPDATE", {}, Exception("could not connect"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Ledger, "beat", beat)
    out = run_trial_attempt("end5", record.trial_id, 1, worker="test")
    assert "requeued" in out  # issue 42: the outage gives the attempt back, it is not lost
    assert folder.stat().st_mtime_ns == cut["at"]  # nothing written once the ledger was gone
    lease = Ledger(WorkerSettings.from_env().ledger_url).lease(record.trial_id)
    assert (lease.state, lease.attempt) == ("queued", 1)


def test_an_ended_run_whose_lease_is_not_done_is_still_in_flight():
    from workers.studies.ledger import Lease
    from workers.studies.records import trial_status

    def lease(state, outcome=None):
        return Lease(trial_id="t", study="s", run_id="r", attempt=1, state=state, owner=None, worker=None, queue="cpu",
                     heartbeat_s=None, sent_s=None, updated_s=0.0, stop_reason=None, outcome=outcome)

    assert trial_status({"status": "reached"}, lease("queued")) == "queued"
    assert trial_status({"status": "reached"}, lease("creating")) == "queued"
    assert trial_status({"status": "reached"}, lease("done", "reached")) == "reached"
    assert trial_status({"status": "running"}, lease("done", "pruned")) == "pruned"
    assert trial_status({"status": "reached"}, None) == "reached"


def test_an_optuna_cell_asks_for_its_next_trial_only_once_the_last_one_is_done_and_told(worker_env, token_store,
                                                                                       monkeypatch):
    """The chaos run's fault: the ledger could not say "done" (a database outage) after the run had
    ended; the attempt went back to the queue, and the cell, taking the ended run for an ended trial,
    asked for its next one before Optuna knew the first one's value."""
    from workers.trials.trial import run_trial_attempt

    [record] = launch("end5", batch_sizes=[8], search={"kind": "optuna", "n_trials": 2, "parallel_per_cell": 1,
                                                        "lr_min": 3e-3, "lr_max": 3e-2})
    s = WorkerSettings.from_env()
    ledger, tracker = Ledger(s.ledger_url), Tracker(s.tracking_uri)
    real, calls = Ledger.finish, []

    def outage_once(self, *args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise sqlalchemy.exc.OperationalError("UPDATE cbs_trial_leases", {}, Exception("could not connect"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Ledger, "finish", outage_once)
    out = run_trial_attempt("end5", record.trial_id, 1, worker="test")
    assert "store unreachable" in out["requeued"]
    assert tracker.get_run(record.run_id).data.tags["outcome"] == "finished"  # the run ended first ...
    study = optuna.load_study(storage=s.optuna_storage, study_name=f"end5/{record.cell_id}")
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE"]  # ... and Optuna was told
    assert ledger.lease(record.trial_id).state == "queued"
    Runner(s).advance("end5")
    assert [r.status for r in api.study_records("end5")] == ["queued"]  # no second trial yet
    again = run_trial_attempt("end5", record.trial_id, 1, worker="test")
    assert again["outcome"] == "finished"
    Runner(s).advance("end5")
    records = sorted(api.study_records("end5"), key=lambda r: r.search_number)
    assert [r.search_number for r in records] == [0, 1] and records[0].status == "finished"
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE", "RUNNING"]


def test_a_lease_left_creating_after_its_run_exists_is_queued_and_sent_once_stale(worker_env, token_store,
                                                                                 monkeypatch):
    """The runner raised between creating a trial's run and queueing its lease: the planner saw the
    run and never started the trial again, which then waited forever (once in the issue-27 run)."""
    import sqlalchemy as sa

    from workers.studies.ledger import LEASES
    from workers.trials.trial import run_trial_attempt

    real = Ledger.mark_queued
    monkeypatch.setattr(Ledger, "mark_queued", lambda self, *a, **k: (_ for _ in ()).throw(
        sqlalchemy.exc.OperationalError("UPDATE cbs_trial_leases", {}, Exception("could not connect"))))
    with pytest.raises(sqlalchemy.exc.OperationalError):
        api.launch_study(tiny_spec("stuck", batch_sizes=[8]))
    monkeypatch.setattr(Ledger, "mark_queued", real)
    s = WorkerSettings.from_env()
    ledger = Ledger(s.ledger_url)
    [record] = api.study_records("stuck")
    assert ledger.lease(record.trial_id).state == "creating" and record.status == "queued"
    report = Runner(s).advance("stuck")  # not stale yet: left alone
    assert ledger.lease(record.trial_id).state == "creating" and record.trial_id not in report.resent
    with ledger.engine.begin() as conn:  # stale: as if the creator died CBS_STALE_AFTER_S ago
        conn.execute(sa.update(LEASES).where(LEASES.c.trial_id == record.trial_id)
                     .values(updated_s=time.time() - s.stale_after_s - 1))
    report = Runner(s).advance("stuck")
    assert record.trial_id in report.resent and ledger.lease(record.trial_id).state == "queued"
    assert run_trial_attempt("stuck", record.trial_id, 1, worker="test")["outcome"] == "finished"

"""The study runner and the trial function, in this process (no worker): refusals leave nothing
behind, launching is idempotent, lost trials come back as the next attempt up to the cap, a
diverged trial is kept and never retried, a redelivered task takes over from a dead holder."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cbscore.errors import ConfigError
from tests.workers.conftest import tiny_spec, tiny_spec_dict
from workers.infra.broker_queues import queue_depth
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.studies.ledger import Ledger, this_process
from workers.studies.runner import Runner
from workers.tracking import Tracker


def nothing_created(name: str) -> None:
    s = WorkerSettings.from_env()
    assert Tracker(s.tracking_uri).client.get_experiment_by_name(name) is None
    assert Ledger(s.ledger_url).leases(name) == {}
    assert queue_depth("cpu") == 0


def dead_owner() -> str:
    """``host:pid`` of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return this_process().rsplit(":", 1)[0] + f":{child.pid}"


@pytest.mark.parametrize("changes, field, words", [
    ({"batch_sizes": [4, 8, 0]}, "batch_sizes", "must be a positive integer, but got 0."),
    ({"settings": [{"model": "tiny-9M", "tokens": 30_000}]}, "settings[0].model", "is not a model preset"),
    ({"search": {"kind": "grid", "lrs": [-0.01]}}, "search.lrs", "must be a positive finite number, but got -0.01."),
    ({"target_losses": {"tiny-0.1M_D15K": float("nan")}}, "target_losses.tiny-0.1M_D15K", "must be a finite number"),
    ({"max_trials": 2}, "max_trials", "too large to be sane (4 trials exceed max_trials=2)"),
    # A D that cannot hold one step at B_ref (8 × 16 tokens): the trainer's own check, at launch.
    # (Cells above B_ref are budgeted in steps, so only the reference and smaller cells can fail.)
    ({"settings": [{"model": "tiny-0.1M", "tokens": 100}]}, "max_tokens", "must allow at least one step"),
])
def test_bad_spec_is_refused_with_nothing_created(worker_env, changes, field, words):
    with pytest.raises(ConfigError) as err:
        api.launch_study(tiny_spec_dict("bad", **changes))
    assert err.value.field == field and words in str(err.value)
    nothing_created("bad")


def test_a_prepared_store_too_small_for_the_largest_budget_is_refused_at_launch(worker_env, token_store):
    # The session's store holds the first 160 chapters (about 334k training tokens at T = 16). At
    # D = 150k the reference fits, but a cell above B_ref may read up to 2.5·D in one pass: once
    # that trial failed in a worker after the others had run (the chaos run's first sizing).
    held = token_store.train_stream(16, seed=0).n_tokens
    with pytest.raises(ConfigError) as err:
        api.launch_study(tiny_spec_dict("big", settings=[{"model": "tiny-0.1M", "tokens": 150_000}]))
    assert err.value.field == "data.max_documents" and err.value.value == 160
    assert f"holds {held:,} training tokens" in str(err.value) and "tiny-0.1M_D150K at batch size 32" in str(err.value)
    nothing_created("big")
    # repetition allowed: the same spec launches
    assert api.launch_study(tiny_spec_dict("big", settings=[{"model": "tiny-0.1M", "tokens": 150_000}],
                                           allow_repeat=True)) == "big"


def test_launch_creates_the_study_once_and_refuses_a_different_spec_under_its_name(worker_env):
    assert api.launch_study(tiny_spec("s1")) == "s1"
    assert api.launch_study(tiny_spec_dict("s1")) == "s1"  # the same spec again: resumed, nothing new
    records = api.study_records("s1")
    assert [(r.role, r.batch_size, r.status, r.attempt) for r in records] == [("reference", 8, "queued", 1)]
    assert queue_depth("cpu") == 1
    run = Tracker(WorkerSettings.from_env().tracking_uri).get_run(records[0].run_id)
    assert run.info.status == "SCHEDULED"
    assert {k: run.data.tags[k] for k in ("study", "setting", "role", "batch_size", "trial_id", "attempt")} == {
        "study": "s1", "setting": "tiny-0.1M_D15K", "role": "reference", "batch_size": "8",
        "trial_id": "s1.tiny-0.1M_D15K.b8.lr1e-2.s0", "attempt": "1"}
    assert run.data.params["batch_size"] == "8" and run.data.params["data.vocab_size"] == "320"
    with pytest.raises(ConfigError, match="exists with a different spec"):
        api.launch_study(tiny_spec("s1", b_ref=16))
    [summary] = api.list_studies()
    assert (summary.name, summary.status, dict(summary.counts), summary.b_ref) == ("s1", "running", {"queued": 1}, 8)


def test_cancel_ends_queued_trials_and_the_study(worker_env):
    api.launch_study(tiny_spec("s2"))
    assert api.cancel_study("s2") == 1
    [record] = api.study_records("s2")
    assert record.status == "stopped"
    tracker = Tracker(WorkerSettings.from_env().tracking_uri)
    assert tracker.get_run(record.run_id).info.status == "KILLED"
    parent = tracker.study_run("s2")
    assert parent.info.status == "KILLED" and parent.data.tags["status"] == "cancelled"
    assert Runner().advance("s2").skipped == "study is cancelled"
    # The task still in the queue finds its lease ended and exits without training.
    from workers.trials.trial import run_trial_attempt

    assert "skipped" in run_trial_attempt("s2", record.trial_id, 1)


def test_lost_trial_is_requeued_as_next_attempt_until_the_cap(worker_env, monkeypatch):
    monkeypatch.setenv("CBS_MAX_ATTEMPTS", "2")
    api.launch_study(tiny_spec("s3"))
    s = WorkerSettings.from_env()
    ledger, runner = Ledger(s.ledger_url), Runner(s)
    [record] = api.study_records("s3")
    tid = record.trial_id
    assert ledger.claim(tid, 1, owner=dead_owner(), worker="cpu@x", now_s=1e9)  # its worker then died
    assert api.study_records("s3")[0].status == "lost"
    report = runner.advance("s3")
    assert report.requeued == (tid,)
    lease = ledger.lease(tid)
    assert (lease.state, lease.attempt) == ("queued", 2)
    [record] = api.study_records("s3")
    assert (record.status, record.attempt) == ("queued", 2)
    assert runner.tracker.get_run(record.run_id).info.status == "SCHEDULED"
    assert queue_depth("cpu") == 2  # the a1 message (now stale: it will exit) and the a2 one
    assert runner.advance("s3").requeued == ()  # idempotent
    assert ledger.claim(tid, 2, owner=dead_owner(), worker="cpu@x", now_s=1e9)  # dies again: at the cap
    report = runner.advance("s3")
    assert report.failed == (tid,) and report.requeued == ()
    [record] = api.study_records("s3")
    run = runner.tracker.get_run(record.run_id)
    assert (record.status, run.info.status) == ("failed", "FAILED")
    assert run.data.tags["stop_reason"] == "lost its worker 2 times (CBS_MAX_ATTEMPTS=2)"


def test_a_trial_lost_after_each_new_checkpoint_is_never_failed_one_that_makes_none_is(worker_env, monkeypatch):
    """Issue 42: kills from outside (a chaos run's, a node taken away) after a checkpoint cost no
    attempt, so a reference trial killed three times at the default cap still runs; losses that
    saved nothing new are the trial's own and spend the cap."""
    monkeypatch.setenv("CBS_MAX_ATTEMPTS", "2")
    api.launch_study(tiny_spec("s3p"))
    s = WorkerSettings.from_env()
    ledger, runner = Ledger(s.ledger_url), Runner(s)
    [record] = api.study_records("s3p")
    tid = record.trial_id
    for attempt, step in ((1, 20), (2, 40), (3, 60)):  # each holder saves a checkpoint, then dies
        owner = dead_owner()
        assert ledger.claim(tid, attempt, owner=owner, worker="cpu@x", now_s=1e9)
        assert ledger.beat(tid, attempt, owner, 1e9, checkpoint_step=step)[0]
        [record] = api.study_records("s3p")
        assert (record.status, record.attempts_spent) == ("lost", 0)
        assert runner.advance("s3p").requeued == (tid,)
    for attempt, spent in ((4, 1), (5, 2)):  # then it dies twice before saving anything new
        assert ledger.claim(tid, attempt, owner=dead_owner(), worker="cpu@x", now_s=1e9)
        assert api.study_records("s3p")[0].attempts_spent == spent
        report = runner.advance("s3p")
        assert (report.requeued, report.failed) == (((tid,), ()) if spent < 2 else ((), (tid,)))
    run = runner.tracker.get_run(api.study_records("s3p")[0].run_id)
    assert run.data.tags["stop_reason"] == ("lost its worker 5 times, 2 of them before saving a checkpoint past "
                                            "the furthest one (CBS_MAX_ATTEMPTS=2 counts those)")


def test_diverged_trial_is_kept_and_not_retried(worker_env, token_store):
    from workers.trials.trial import run_trial_attempt

    api.launch_study(tiny_spec("s4", batch_sizes=[8], search={"kind": "grid", "lrs": [3.0]}))
    [record] = api.study_records("s4")
    out = run_trial_attempt("s4", record.trial_id, 1, worker="test")
    assert out["outcome"] == "diverged"
    [record] = api.study_records("s4")
    run = Tracker(WorkerSettings.from_env().tracking_uri).get_run(record.run_id)
    assert (record.status, run.info.status, run.data.tags["outcome"]) == ("diverged", "FINISHED", "diverged")
    assert "above 2× its running minimum" in run.data.tags["stop_reason"]
    # Not retried: the same task again (a redelivery) and later passes leave it alone.
    assert "skipped" in run_trial_attempt("s4", record.trial_id, 1, worker="test")
    assert Runner().advance("s4").skipped == "study is done"  # the trial's own pass ended the study
    [summary] = api.list_studies()
    assert summary.status == "done" and "no reference run at B_ref=8 gives a loss at D" in summary.errors[0]
    assert queue_depth("cpu") == 1  # only the launch's message; nothing was enqueued again
    [record] = api.study_records("s4")
    assert (record.status, record.attempt) == ("diverged", 1)


def test_redelivered_task_takes_over_from_a_dead_holder_and_resumes(worker_env, token_store):
    """A child killed mid-trial (its parent alive) gets its task redelivered: the next attempt
    resumes from the checkpoint the dead child left."""
    from cbscore.train.callbacks import Callback
    from cbscore.train.config import TrainConfig
    from cbscore.train.trainer import train
    from workers.studies.records import trial_spec
    from workers.trials.trial import checkpoint_dir, run_trial_attempt

    api.launch_study(tiny_spec("s5", batch_sizes=[8], settings=[{"model": "tiny-0.1M", "tokens": 7_500}]))
    [record] = api.study_records("s5")
    s = WorkerSettings.from_env()
    ledger, tracker = Ledger(s.ledger_url), Tracker(s.tracking_uri)
    spec = trial_spec(tracker.get_run(record.run_id))

    class Crash(Callback):
        def post_step(self, state, metrics):
            if state.step == 21:
                raise SystemExit("killed")  # the checkpoint of step 20 is on disk, as a kill would leave it

    config = TrainConfig.from_dict({**spec.train_config, "checkpoint_dir": checkpoint_dir(record.trial_id),
                                    "checkpoint_every_steps": 20, "threads": 1})
    assert ledger.claim(record.trial_id, 1, owner=dead_owner(), worker="cpu@x", now_s=1e9)
    with pytest.raises(SystemExit):
        train(config, [Crash()])
    out = run_trial_attempt("s5", record.trial_id, 1, worker="test")  # the redelivered a1 message
    assert (out["attempt"], out["outcome"], out["resumed_from_step"]) == (2, "finished", 20)
    run = tracker.get_run(record.run_id)
    assert (run.data.tags["attempt"], run.data.tags["resumed_from_step"], run.info.status) == ("2", "20", "FINISHED")
    assert api.study_status("s5").status == "done"


@pytest.mark.parametrize("reason, outcome", [("pruned", "pruned"), ("cancelled", "stopped")])
def test_a_stop_asked_through_the_lease_ends_the_trial_killed(worker_env, token_store, reason, outcome):
    from workers.trials.trial import run_trial_attempt

    api.launch_study(tiny_spec("s6", batch_sizes=[8]))
    [record] = api.study_records("s6")
    s = WorkerSettings.from_env()
    assert Ledger(s.ledger_url).request_stop(record.trial_id, reason)  # what advance does for a pruned trial
    out = run_trial_attempt("s6", record.trial_id, 1, worker="test")
    assert out["outcome"] == outcome and out["steps"] < 117
    run = Tracker(s.tracking_uri).get_run(record.run_id)
    assert (run.info.status, run.data.tags["outcome"], run.data.tags["stop_reason"]) == ("KILLED", outcome, reason)


def test_a_pruned_trial_says_which_rule_stopped_it_and_the_costs_split_by_rule(worker_env, token_store):
    from workers.trials.trial import run_trial_attempt

    api.launch_study(tiny_spec("s8", batch_sizes=[8]))
    [record] = api.study_records("s8")
    runner = Runner()
    assert runner.request_stops([(record.trial_id, "pruned")], {record.trial_id: "stop_far_rates"},
                                {record.trial_id: record.run_id}) == [record.trial_id]
    out = run_trial_attempt("s8", record.trial_id, 1, worker="test")
    assert out["outcome"] == "pruned"
    run = Tracker(WorkerSettings.from_env().tracking_uri).get_run(record.run_id)
    assert (run.data.tags["stop_requested"], run.data.tags["stopped_by"]) == ("pruned", "stop_far_rates")
    [ended] = api.study_records("s8")
    assert (ended.status, ended.stopped_by) == ("pruned", "stop_far_rates")
    costs = api.study_status("s8").costs
    assert dict(costs.pruned_tokens_by_rule) == {"stop_far_rates": ended.tokens}
    # A second ask of the same stop is not taken again (the lease already holds it).
    assert runner.request_stops([(record.trial_id, "pruned")], {}, {record.trial_id: record.run_id}) == []


def test_a_redelivered_task_at_the_attempt_cap_ends_failed_instead_of_looping(worker_env, monkeypatch):
    """A trial that kills its child every time: Celery redelivers the message each time; at the
    cap the redelivered task ends the trial ``failed`` (and acks) instead of training again."""
    from workers.trials.trial import run_trial_attempt

    monkeypatch.setenv("CBS_MAX_ATTEMPTS", "2")
    api.launch_study(tiny_spec("s7", batch_sizes=[8]))
    [record] = api.study_records("s7")
    s = WorkerSettings.from_env()
    ledger = Ledger(s.ledger_url)
    assert ledger.claim(record.trial_id, 1, owner=dead_owner(), worker="cpu@x", now_s=1e9)
    assert ledger.take_over(record.trial_id, 1, dead_owner=ledger.lease(record.trial_id).owner,
                            owner=dead_owner(), worker="cpu@x", now_s=1e9)  # attempt 2 died as well
    out = run_trial_attempt("s7", record.trial_id, 2, worker="test")  # the message, delivered a third time
    assert (out["attempt"], out["outcome"]) == (2, "failed")
    run = Tracker(s.tracking_uri).get_run(record.run_id)
    assert (run.info.status, run.data.tags["outcome"]) == ("FAILED", "failed")
    assert run.data.tags["stop_reason"] == "lost its worker 2 times (CBS_MAX_ATTEMPTS=2)"
    assert "skipped" in run_trial_attempt("s7", record.trial_id, 2, worker="test")  # and never again


def test_watch_survives_a_pass_that_raises_any_exception(worker_env, monkeypatch):
    """Issue 12: a pass that fails with something other than a CbsError (seen: NotADirectoryError
    while the broker folder was briefly unusable) is logged, and the runner goes on."""
    from workers.studies.runner import Runner

    runner = Runner()
    calls = []

    def flaky(log=None):
        calls.append(1)
        if len(calls) == 1:
            raise NotADirectoryError("broker/queue is not a directory")
        return []

    monkeypatch.setattr(runner, "advance_all", flaky)
    logs: list[str] = []
    runner.watch(period_s=0.01, passes=3, log=logs.append)
    assert len(calls) == 3
    assert logs == ["cbs study watch: this pass failed (NotADirectoryError: broker/queue is not a directory); "
                    "retrying in 0.01 s"]


def test_one_failing_study_does_not_stop_the_others(worker_env, monkeypatch):
    """Issue 12, item 3: the runner logs a study whose pass fails and advances the next one."""
    api.launch_study(tiny_spec("bad-one"))
    api.launch_study(tiny_spec("good-one"))
    runner = Runner()
    real = runner.advance

    def advance(study):
        if study == "bad-one":
            raise NotADirectoryError("its folder is briefly unusable")
        return real(study)

    monkeypatch.setattr(runner, "advance", advance)
    logs: list[str] = []
    reports = {r.study: r for r in runner.advance_all(log=logs.append)}
    assert reports["bad-one"].skipped == "failed"
    assert reports["bad-one"].errors == ("NotADirectoryError: its folder is briefly unusable",)
    assert reports["good-one"].skipped is None  # advanced
    assert logs == ["cbs study watch: bad-one: this pass failed (NotADirectoryError: its folder is briefly "
                    "unusable); the other studies go on"]

"""MLflow tracking against a real SQLite store: layout, run statuses, the callback's batched
metrics (checked against the trainer's own result), resumed trials and cached histories."""

from __future__ import annotations

import json

import pytest

from cbscore.train.callbacks import Callback
from tests.workers.conftest import DATA
from workers.tracking import MlflowCallback, Tracker, flatten, metric


@pytest.fixture
def tracker(tmp_path, mlflow_uri):
    return Tracker(mlflow_uri, str(tmp_path / "artifacts"))


def make_study(tracker: Tracker, name: str = "s1"):
    spec = {"name": name, "kind": "custom", "b_ref": 8}
    return tracker.create_study(name, spec_dict=spec, spec_yaml="name: s1\n", params={"b_ref": 8},
                                tags={"kind": "custom"})


def test_study_layout_parent_spec_and_child_links(tracker):
    exp_id, parent_id = make_study(tracker)
    run_id = tracker.create_trial(exp_id, parent_id, trial_id="s1.a.b8.lr1e-2.s0",
                                  tags={"role": "reference", "batch_size": "8"},
                                  params={"lr": 0.01, "data": {"source": "builtin"}, "ewa_taus": None})
    parent = tracker.study_run("s1")
    assert parent.info.run_id == parent_id
    # MLflow 3's UI opens a study on its training runs (not the GenAI overview) by this tag
    assert tracker.experiment("s1").tags["mlflow.experimentKind"] == "custom_model_development"
    assert tracker.study_spec(parent) == {"name": "s1", "kind": "custom", "b_ref": 8}
    assert [e.name for e, _ in tracker.studies()] == ["s1"]
    runs = tracker.trial_runs(exp_id, parent_id)
    assert [r.info.run_id for r in runs] == [run_id]
    run = runs[0]
    assert run.info.status == "SCHEDULED"
    assert run.data.tags["mlflow.parentRunId"] == parent_id
    assert (run.data.tags["status"], run.data.tags["attempt"], run.data.tags["role"]) == ("queued", "1", "reference")
    assert run.data.params == {"lr": "0.01", "data.source": "builtin", "ewa_taus": "null"}
    assert tracker.find_trial(exp_id, "s1.a.b8.lr1e-2.s0").info.run_id == run_id
    assert tracker.find_trial(exp_id, "s1.nope") is None


@pytest.mark.parametrize("outcome, run_status", [
    ("reached", "FINISHED"), ("censored", "FINISHED"), ("diverged", "FINISHED"),
    ("pruned", "KILLED"), ("stopped", "KILLED"), ("failed", "FAILED"),
])
def test_run_status_follows_the_trial(tracker, outcome, run_status):
    exp_id, parent_id = make_study(tracker)
    run_id = tracker.create_trial(exp_id, parent_id, trial_id="t", tags={}, params={})
    tracker.set_trial_status(run_id, "running", attempt=1)
    assert tracker.get_run(run_id).info.status == "RUNNING"
    tracker.set_trial_status(run_id, "queued", attempt=2)  # lost, re-enqueued: not RUNNING any more
    assert tracker.get_run(run_id).info.status == "SCHEDULED"
    tracker.end_trial(run_id, outcome)
    run = tracker.get_run(run_id)
    assert run.info.status == run_status and run.info.end_time is not None
    assert (run.data.tags["status"], run.data.tags["outcome"], run.data.tags["attempt"]) == (outcome, outcome, "2")


def test_flatten_nested_config():
    assert flatten({"a": 1, "d": {"x": "y", "z": [1, 2]}, "t": True, "n": None}) == {
        "a": "1", "d.x": "y", "d.z": "[1, 2]", "t": "true", "n": "null"}


def test_history_keeps_the_latest_value_per_step_and_caches_ended_runs(tracker, tmp_path, monkeypatch):
    monkeypatch.setenv("CBS_HOME", str(tmp_path / "home"))
    exp_id, parent_id = make_study(tracker)
    run_id = tracker.create_trial(exp_id, parent_id, trial_id="t", tags={}, params={})
    # A resumed attempt logs steps 20 and 30 again after the checkpoint at step 10.
    tracker.log_metrics(run_id, [metric("eval/loss_ewa", v, s, now_s=t) for s, v, t in
                                 [(0, 9.0, 1), (10, 8.0, 2), (20, 7.5, 3), (30, 7.0, 4), (20, 7.4, 5), (30, 6.9, 6)]])
    assert tracker.history(tracker.get_run(run_id), "eval/loss_ewa") == ((0.0, 10.0, 20.0, 30.0), (9.0, 8.0, 7.4, 6.9))
    tracker.end_trial(run_id, "reached")
    first = tracker.history(tracker.get_run(run_id), "eval/loss_ewa")
    tracker.log_metrics(run_id, [metric("eval/loss_ewa", 1.0, 40)])  # nothing writes to an ended run; if it did...
    assert tracker.history(tracker.get_run(run_id), "eval/loss_ewa") == first  # ...the cached history is served
    # A new process reads it from this host's disk cache, without asking MLflow.
    monkeypatch.setattr(Tracker, "_HISTORY", type(Tracker._HISTORY)())
    monkeypatch.setattr(tracker.client, "get_metric_history", lambda *a: pytest.fail("asked MLflow again"))
    assert tracker.history(tracker.get_run(run_id), "eval/loss_ewa") == first


class StopAt(Callback):
    def __init__(self, step: int):
        self.step = step

    def post_step(self, state, metrics):
        if state.step >= self.step:
            state.request_stop("test")


def test_callback_sends_what_the_trainer_measured_and_marks_a_resume(tracker, tmp_path, token_store):
    from cbscore.train.config import TrainConfig
    from cbscore.train.trainer import train

    exp_id, parent_id = make_study(tracker)
    run_id = tracker.create_trial(exp_id, parent_id, trial_id="t", tags={}, params={})
    config = TrainConfig(model="tiny-0.1M", batch_size=8, context_tokens=16, lr=0.01, max_tokens=7_500,
                         data=DATA, threads=1, device="cpu", eval_windows=16, ewa_taus=(0.99, 0.999),
                         target_loss=3.9, checkpoint_dir=str(tmp_path / "ckpt"))
    first = MlflowCallback(tracker, run_id, flush_s=3600)
    stopped = train(config, [first, StopAt(20)])
    assert stopped.status == "stopped" and stopped.steps == 20
    assert first.flushes == 3  # at pre_train, before the checkpoint, at the end: nothing per step
    second = MlflowCallback(tracker, run_id, flush_s=3600)
    result = train(config, [second])
    assert result.resumed_from_step == 20 and result.status in ("reached", "censored")

    run = tracker.get_run(run_id)
    assert run.data.tags["resumed_from_step"] == "20"
    steps, losses = tracker.history(run, "eval/loss_ewa")
    assert steps == tuple(float(p.step) for p in result.eval_history)
    assert losses == pytest.approx([p.loss for p in result.eval_history])
    raw_steps, raw = tracker.history(run, "eval/loss_raw")
    assert raw == pytest.approx([p.raw_loss for p in result.eval_history])
    for tau in ("0.99", "0.999"):
        assert tracker.history(run, f"eval/loss_ewa_{tau}")[1] == pytest.approx(
            [p.ewa_losses[tau] for p in result.eval_history])
    train_steps, train_losses = tracker.history(run, "train/loss")
    assert train_steps == tuple(float(s) for s, _ in result.train_log)
    assert train_losses == pytest.approx([v for _, v in result.train_log])
    m = run.data.metrics
    assert m["progress/step"] == result.steps and m["summary/steps"] == result.steps
    assert m["progress/tokens"] == result.steps * 8 * 16
    if result.status == "reached":
        assert m["summary/steps_to_target"] == pytest.approx(result.steps_to_target)
    assert "heartbeat" in m and "optim/lr" in m and "perf/tokens_per_s" in m
    assert sorted(tracker.curves(run_id)) == sorted(k for k in m if k.split("/")[0] in ("train", "eval", "optim", "perf"))
    assert json.loads(tracker.get_run(parent_id).data.tags["cbs.spec"])["name"] == "s1"


def test_an_ended_runs_eval_curve_tag_reads_as_its_metric_history(tracker, tmp_path, token_store):
    """The result's ``eval_curve`` tag (issue 25's first read) gives exactly the ``eval/loss_ewa``
    history, so reading a study's records needs no history call per ended run; a run without the
    tag (one written before it) reads the history as before."""
    from cbscore.train.config import TrainConfig
    from cbscore.train.trainer import train
    from workers.tracking import EVAL_CURVE_TAG, result_tags

    exp_id, parent_id = make_study(tracker)
    run_id = tracker.create_trial(exp_id, parent_id, trial_id="t", tags={}, params={})
    config = TrainConfig(model="tiny-0.1M", batch_size=8, context_tokens=16, lr=0.01, max_tokens=7_500,
                         data=DATA, threads=1, device="cpu", eval_windows=16, ewa_taus=(0.99, 0.999))
    result = train(config, [MlflowCallback(tracker, run_id, flush_s=3600)])
    tags = result_tags(result)
    steps, losses = json.loads(tags[EVAL_CURVE_TAG])
    assert steps == [p.step for p in result.eval_history] and len(steps) > 8
    tracker.end_trial(run_id, result.status, **tags)
    run = tracker.get_run(run_id)
    from_tag = tracker.history(run, "eval/loss_ewa")
    Tracker._HISTORY.clear()
    tracker.client.delete_tag(run_id, EVAL_CURVE_TAG)
    bare = tracker.get_run(run_id)
    assert EVAL_CURVE_TAG not in bare.data.tags
    calls = []
    real = tracker.client.get_metric_history
    tracker.client.get_metric_history = lambda *a, **k: calls.append(a) or real(*a, **k)
    try:
        from_history = tracker.history(bare, "eval/loss_ewa")
        Tracker._HISTORY.clear()
        again = tracker.history(run, "eval/loss_ewa")  # the tagged run: no history call
    finally:
        del tracker.client.get_metric_history
    assert from_tag == from_history == again  # exactly equal floats, steps as floats
    assert len(calls) == 1


def test_ended_runs_survive_a_restart_on_disk(tracker, tmp_path, monkeypatch):
    """A new process (the web app after a restart) starts from the ended runs this host already
    read: it asks MLflow only for what is active or ended since, not for every run again. A cache
    file it cannot read costs a full read, never a wrong answer."""
    monkeypatch.setenv("CBS_HOME", str(tmp_path / "home"))
    exp_id, parent_id = make_study(tracker)
    ids = []
    for k in range(3):
        run_id = tracker.create_trial(exp_id, parent_id, trial_id=f"s1.a.b8.lr{k}.s0", tags={"role": "trial"},
                                      params={"lr": 0.01})
        ids.append(run_id)
    for run_id in ids[:2]:
        tracker.client.set_terminated(run_id, status="FINISHED", end_time=1_000)  # long ago
    assert sorted(r.info.run_id for r in tracker.trial_runs(exp_id, parent_id)) == sorted(ids)

    searched = []
    search = Tracker.runs
    monkeypatch.setattr(Tracker, "runs", lambda self, e, flt="", **kw: searched.append(flt) or search(self, e, flt, **kw))
    monkeypatch.setattr(Tracker, "_ENDED", {})  # a new process: nothing in memory
    runs = {r.info.run_id: r for r in tracker.trial_runs(exp_id, parent_id)}
    assert sorted(runs) == sorted(ids)
    assert runs[ids[0]].info.status == "FINISHED" and runs[ids[2]].info.status == "SCHEDULED"
    assert searched and all(" and attributes." in f for f in searched)  # never the full read
    # The third run ends: the next process sees it too.
    tracker.client.set_terminated(ids[2], status="KILLED")
    monkeypatch.setattr(Tracker, "_ENDED", {})
    assert tracker.trial_runs(exp_id, parent_id) and {
        r.info.run_id: r.info.status for r in tracker.trial_runs(exp_id, parent_id)}[ids[2]] == "KILLED"
    # A broken cache file is a miss: one full read, the right runs.
    [path] = (tmp_path / "home" / "cache" / "mlflow-runs").glob("*.pickle")
    path.write_bytes(b"not a pickle")
    monkeypatch.setattr(Tracker, "_ENDED", {})
    searched.clear()
    assert sorted(r.info.run_id for r in tracker.trial_runs(exp_id, parent_id)) == sorted(ids)
    assert searched == [f"tags.`mlflow.parentRunId` = '{parent_id}'"]


def test_the_history_cache_is_capped_in_bytes_not_entries(monkeypatch):
    """Issue 12, item 9: a few very long curves must not hold gigabytes however few they are."""
    from workers.tracking import Tracker, _curve_bytes

    monkeypatch.setattr(Tracker, "_HISTORY", __import__("collections").OrderedDict())
    monkeypatch.setattr(Tracker, "_HISTORY_BYTES", 0)
    monkeypatch.setattr(Tracker, "_HISTORY_MAX_BYTES", 1_000_000)
    long_curve = (tuple(float(i) for i in range(5000)), tuple(1.0 for _ in range(5000)))  # ≈ 320 kB
    for i in range(10):
        Tracker._remember(("uri", f"run{i}", "train/loss"), long_curve)
    assert len(Tracker._HISTORY) == 3  # 3 × 320 kB fit in 1 MB; the 7 oldest went
    assert list(Tracker._HISTORY)[0] == ("uri", "run7", "train/loss")
    assert Tracker._HISTORY_BYTES == 3 * _curve_bytes(long_curve) <= 1_000_000


def test_the_disk_cache_is_pruned_least_recently_used_first(tmp_path):
    import os

    from workers.tracking import prune_disk_cache

    (tmp_path / "mlflow-history").mkdir()
    for i in range(10):
        path = tmp_path / "mlflow-history" / f"run{i}.pickle"
        path.write_bytes(b"x" * 1000)
        os.utime(path, (1000 + i, 1000 + i))
    os.utime(tmp_path / "mlflow-history" / "run0.pickle")  # read just now: kept
    assert prune_disk_cache(tmp_path, 4000) == 6000
    left = sorted(p.name for p in (tmp_path / "mlflow-history").iterdir())
    assert left == ["run0.pickle", "run7.pickle", "run8.pickle", "run9.pickle"]


def test_callback_logs_the_noise_scale_the_trainer_measured(tracker, token_store):
    from cbscore.train.config import TrainConfig
    from cbscore.train.trainer import train

    class Seen(Callback):
        def __init__(self):
            self.gns = {}

        def post_step(self, state, metrics):
            if metrics is not None and "gns_b_simple" in metrics:
                self.gns[state.step] = (metrics["gns_g2"], metrics["gns_trace_sigma"], metrics["gns_b_simple"])

    exp_id, parent_id = make_study(tracker)
    run_id = tracker.create_trial(exp_id, parent_id, trial_id="t", tags={}, params={})
    config = TrainConfig(model="tiny-0.1M", batch_size=8, context_tokens=16, lr=0.01, max_tokens=4_096,
                         data=DATA, threads=1, device="cpu", eval_windows=16, ewa_taus=(0.99,),
                         gns_micro_batch_size=2)
    seen = Seen()
    train(config, [MlflowCallback(tracker, run_id, flush_s=3600), seen])
    run = tracker.get_run(run_id)
    assert seen.gns
    for i, key in enumerate(("gns/g2", "gns/trace_sigma", "gns/b_simple")):
        steps, values = tracker.history(run, key)
        logged = {s: v for s, v in seen.gns.items() if v[i] is not None}  # None (not finite) is never logged
        assert steps == tuple(float(s) for s in logged)
        assert values == pytest.approx([v[i] for v in logged.values()])
    assert "gns/b_simple" in tracker.curves(run_id)

"""Issue 22, finding 1: no metric point is lost or logged twice when a trial dies.

A checkpoint is written only after every metric up to its step is in the store, and an attempt
that resumes (or finds the trial ended) sends from the checkpoint what the store lacks. Each test
compares a disturbed run's MLflow history with an undisturbed run's of the same trial, step by
step: the same steps, each logged once, the same values.

A kill is made where a real one cannot land deterministically: right after the checkpoint's
``os.replace`` (the process then sends nothing more, as after SIGKILL), and at the final flush.
"""

from __future__ import annotations

from collections import Counter

import pytest
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import TEMPORARILY_UNAVAILABLE

import cbscore.train.checkpointer as checkpointer_module
import cbscore.train.trainer as train_module
from cbscore.train.checkpoint import load_checkpoint
from tests.workers.conftest import DATA
from workers.tracking import MlflowCallback, Tracker

#: Keys whose values a resumed run reproduces exactly (perf/* are timings: steps only).
EXACT = ("train/", "eval/", "optim/", "gns/")


class Killed(BaseException):
    """The process died here (nothing after it reaches the store)."""


@pytest.fixture
def tracker(tmp_path, mlflow_uri):
    return Tracker(mlflow_uri, str(tmp_path / "artifacts"))


def new_run(tracker: Tracker, name: str) -> str:
    exp_id, parent_id = tracker.create_study(name, spec_dict={"name": name}, spec_yaml=f"name: {name}\n",
                                             params={}, tags={})
    return tracker.create_trial(exp_id, parent_id, trial_id=f"{name}.t", tags={}, params={})


def config(folder):
    from cbscore.train.config import TrainConfig

    # 58 steps, a checkpoint every 20, evaluations dense near the end; flushes only at the
    # start, before each checkpoint and at the end (flush_s below): the finding's worst case
    return TrainConfig(model="tiny-0.1M", batch_size=8, context_tokens=16, lr=0.01, max_tokens=7_500, data=DATA,
                       threads=1, device="cpu", eval_windows=16, ewa_taus=(0.99, 0.999),
                       checkpoint_dir=str(folder), checkpoint_every_steps=20, checkpoint_every_seconds=None)


def history(tracker: Tracker, run_id: str, prefixes=("train/", "eval/", "optim/", "perf/", "gns/")) -> dict:
    """``{key: [(step, value), ...]}`` of every curve key, every point the store holds."""
    run = tracker.get_run(run_id)
    return {k: sorted((m.step, m.value) for m in tracker.client.get_metric_history(run_id, k))
            for k in run.data.metrics if k.startswith(prefixes)}


def assert_same_history(tracker: Tracker, undisturbed: str, disturbed: str, prefixes=None) -> None:
    want = history(tracker, undisturbed, *([prefixes] if prefixes else []))
    got = history(tracker, disturbed, *([prefixes] if prefixes else []))
    assert sorted(got) == sorted(want)
    for key, points in want.items():
        steps = [s for s, _ in got[key]]
        twice = [s for s, n in Counter(steps).items() if n > 1]
        assert not twice, f"{key}: steps logged twice {twice}"
        missing = sorted({s for s, _ in points} - set(steps))
        assert not missing, f"{key}: steps missing {missing}"
        assert steps == [s for s, _ in points], key
        if key.startswith(EXACT):
            assert [v for _, v in got[key]] == pytest.approx([v for _, v in points], rel=1e-12, abs=0), key


@pytest.fixture
def undisturbed(tracker, tmp_path, token_store):
    run_id = new_run(tracker, "calm")
    result = train_module.train(config(tmp_path / "calm"), [MlflowCallback(tracker, run_id, flush_s=3600)])
    assert result.status == "finished" and result.steps == 58
    return run_id, result


def dies_after_checkpoint(monkeypatch, callback: MlflowCallback, at_step: int) -> None:
    """The process dies right after the checkpoint of ``at_step`` is on disk: from then on
    nothing it sends reaches the store (its on_error flush included)."""
    real = checkpointer_module.save_checkpoint

    def save_then_die(folder, payload, **kw):
        path = real(folder, payload, **kw)
        if payload["step"] == at_step:
            def dead(*_a, **_k):
                raise RuntimeError("the process is dead")

            monkeypatch.setattr(callback.tracker, "log_metrics", dead)
            raise Killed
        return path

    monkeypatch.setattr(checkpointer_module, "save_checkpoint", save_then_die)


def test_a_kill_right_after_a_checkpoint_loses_no_point_and_logs_none_twice(tracker, tmp_path, undisturbed,
                                                                         monkeypatch):
    calm, _ = undisturbed
    run_id = new_run(tracker, "killed")
    folder = tmp_path / "killed"
    first = MlflowCallback(Tracker(tracker.uri), run_id, flush_s=3600)
    dies_after_checkpoint(monkeypatch, first, at_step=40)
    with pytest.raises(Killed):
        train_module.train(config(folder), [first])
    monkeypatch.undo()
    result = train_module.train(config(folder), [MlflowCallback(tracker, run_id, flush_s=3600)])
    assert (result.status, result.resumed_from_step) == ("finished", 40)
    assert_same_history(tracker, calm, run_id)


def test_a_failed_final_flush_resumes_and_loses_no_point(tracker, tmp_path, undisturbed, monkeypatch):
    """The store is down at the end: the result's checkpoint is not written ahead of its history,
    the attempt raises (the worker gives it back), and the next attempt logs every point."""
    calm, calm_result = undisturbed
    monkeypatch.setenv("CBS_TRACKING_RETRIES", "1")
    run_id = new_run(tracker, "final")
    folder = tmp_path / "final"
    first = MlflowCallback(Tracker(tracker.uri), run_id, flush_s=3600)
    real = first.tracker.log_metrics

    def down_at_the_end(rid, metrics, **options):
        metrics = list(metrics)
        if any(m.step == calm_result.steps for m in metrics):
            raise MlflowException("the database is restarting", error_code=TEMPORARILY_UNAVAILABLE)
        return real(rid, metrics, **options)

    monkeypatch.setattr(first.tracker, "log_metrics", down_at_the_end)
    with pytest.raises(MlflowException):
        train_module.train(config(folder), [first])
    assert load_checkpoint(folder)["result"] is None  # never ahead of the history
    result = train_module.train(config(folder), [MlflowCallback(tracker, run_id, flush_s=3600)])
    assert (result.status, result.resumed_from_step) == ("finished", 40)
    assert_same_history(tracker, calm, run_id)
    assert tracker.get_run(run_id).data.metrics["summary/steps"] == 58


def test_an_ended_trial_sends_what_the_store_lacks_of_its_result(tracker, tmp_path, undisturbed):
    """The checkpoint holds the result but the store lacks the last points (a store restored
    from a backup, a checkpoint of an earlier version): the "already ended" path sends the train
    losses and evaluations of the result past what the store holds, final evaluation included."""
    calm, _ = undisturbed
    run_id = new_run(tracker, "restored")
    kept = [m for key, points in history(tracker, calm, ("train/", "eval/")).items()
            for m in tracker.client.get_metric_history(calm, key) if m.step <= 20]
    tracker.log_metrics(run_id, kept)  # what the backup held
    result = train_module.train(config(tmp_path / "calm"), [MlflowCallback(tracker, run_id, flush_s=3600)])
    assert result.steps == 58 and result.resumed_from_step is None  # returned from the checkpoint
    assert_same_history(tracker, calm, run_id, prefixes=("train/", "eval/"))


def test_a_kill_between_the_chunks_of_one_flush_loses_no_point(tracker, tmp_path, undisturbed, monkeypatch):
    """Issue 42, finding 5: a flush larger than one ``log_batch`` (1,000 metrics; 7 here, a
    number that splits steps) goes in chunks; the process dies after the second chunk of the
    flush before the checkpoint at step 40. The resume marker was one per key family (the last
    ``train/loss`` step), so the other keys of the step cut in two were never sent again."""
    calm, _ = undisturbed
    run_id = new_run(tracker, "chunks")
    folder = tmp_path / "chunks"
    first = MlflowCallback(Tracker(tracker.uri), run_id, flush_s=3600)
    monkeypatch.setattr(Tracker, "METRICS_PER_BATCH", 7)
    real, chunks = first.tracker.client.log_batch, []

    def dies_between_chunks(rid, metrics=(), **kwargs):
        if "dead" in chunks:
            raise RuntimeError("the process is dead")
        if chunks or any(m.key == "train/loss" and m.step > 20 for m in metrics):
            chunks.append(len(metrics))  # the flush before the checkpoint at step 40 (steps 21-40) ...
            if len(chunks) == 3:  # ... dies after its second chunk
                chunks.append("dead")
                raise Killed
        return real(rid, metrics=metrics, **kwargs)

    monkeypatch.setattr(first.tracker.client, "log_batch", dies_between_chunks)
    with pytest.raises(Killed):
        train_module.train(config(folder), [first])
    assert load_checkpoint(folder)["step"] == 20  # the checkpoint at 40 never came
    last = {k: max(s for s, _ in points) for k, points in history(tracker, run_id, ("train/", "optim/")).items()}
    assert last["train/loss"] > 20 and len(set(last.values())) > 1, last  # one step cut between two chunks
    monkeypatch.undo()
    result = train_module.train(config(folder), [MlflowCallback(tracker, run_id, flush_s=3600)])
    assert (result.status, result.resumed_from_step) == ("finished", 20)
    assert_same_history(tracker, calm, run_id)


def test_a_kill_in_the_end_of_trial_window_writes_the_summaries_once(tracker, tmp_path, undisturbed):
    """Issue 42, finding 8: the trial's last flush landed, then the process died before the ledger
    called the trial done; the next attempt finds the result in the checkpoint. It used to log
    every ``summary/*`` point again, and ``heartbeat``/``progress/*`` at step 0 after the end."""
    calm, calm_result = undisturbed

    def everything() -> dict:
        run = tracker.get_run(calm)
        return {k: sorted((m.step, m.value) for m in tracker.client.get_metric_history(calm, k))
                for k in run.data.metrics}

    before = everything()
    summaries = [k for k in before if k.startswith("summary/")]
    assert len(summaries) >= 10 and all(len(before[k]) == 1 for k in summaries)
    again = train_module.train(config(tmp_path / "calm"), [MlflowCallback(tracker, calm, flush_s=3600)])
    assert again.steps == calm_result.steps == 58  # the "already ended" path: the checkpoint's result
    assert everything() == before  # nothing written twice, nothing at step 0

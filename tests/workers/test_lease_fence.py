"""Issue 42, finding 3: every metric write is fenced by the lease.

A trial process frozen past the staleness limit and replaced used to write its buffered and new
``train/*``, ``optim/*``, ``perf/*``, ``eval/*`` points after it thawed, duplicating the new holder's.
Here the lease is really taken over in the ledger (requeued as attempt 2 and claimed by a second
holder) while the first holder is frozen at a step boundary; after it thaws it writes nothing.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from mlflow import MlflowClient
from tests.workers.conftest import tiny_spec, wait_for
from workers.infra.checkpoints import checkpoint_dir
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.studies.ledger import Ledger


def test_a_holder_that_lost_its_lease_while_frozen_writes_no_metric_after_it_thaws(worker_env, token_store,
                                                                                   monkeypatch):
    from workers.trials.trial import StopWatch, run_trial_attempt

    monkeypatch.setenv("CBS_CHECKPOINT_EVERY_S", "0.001")  # a flush before a checkpoint at every log step
    monkeypatch.setenv("CBS_HEARTBEAT_S", "30")  # its heartbeat thread does not tell it in time
    monkeypatch.setenv("CBS_STALE_AFTER_S", "90")
    api.launch_study(tiny_spec("fence1", batch_sizes=[8], settings=[{"model": "tiny-0.1M", "tokens": 200_000}]))
    [record] = api.study_records("fence1")
    tid = record.trial_id
    s = WorkerSettings.from_env()
    freeze, frozen, thaw = threading.Event(), threading.Event(), threading.Event()
    real_post_step = StopWatch.post_step

    def post_step(self, state, metrics):  # after the tracking callback's flush of this step
        if freeze.is_set() and not frozen.is_set():
            frozen.set()
            thaw.wait(60)
        return real_post_step(self, state, metrics)

    monkeypatch.setattr(StopWatch, "post_step", post_step)
    result: dict = {}
    holder = threading.Thread(target=lambda: result.update(run_trial_attempt("fence1", tid, 1, worker="old")))
    holder.start()
    wait_for(lambda: (Path(checkpoint_dir(tid)) / "checkpoint.pt").exists(), 60, every_s=0.05,
             what="the first checkpoint")
    freeze.set()
    wait_for(frozen.is_set, 30, every_s=0.05, what="the holder frozen")
    # Frozen past the staleness limit: the runner gives the trial to attempt 2, a second holder takes it.
    ledger = Ledger(s.ledger_url)
    assert ledger.requeue(tid, 1, now_s=time.time(), stale_before_s=time.time() + 1e6)
    assert ledger.claim(tid, 2, owner="elsewhere:1", worker="new", now_s=time.time())
    client = MlflowClient(s.tracking_uri)
    keys = sorted(client.get_run(record.run_id).data.metrics)
    assert {"train/loss", "optim/lr", "heartbeat", "progress/step"} <= set(keys)
    before = {k: len(client.get_metric_history(record.run_id, k)) for k in keys}
    thaw.set()
    holder.join(timeout=120)
    assert result["skipped"] == "superseded by a newer attempt"
    after = client.get_run(record.run_id).data.metrics
    assert sorted(after) == keys  # no new key ...
    assert {k: len(client.get_metric_history(record.run_id, k)) for k in keys} == before  # ... and no new point

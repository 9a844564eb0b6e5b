"""A two-rank trial on a real CPU worker (``cbs worker --devices-per-trial 2``): a rank killed
with SIGKILL costs the attempt, not the trial, which resumes from its checkpoint as attempt 2."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.workers.conftest import tiny_spec, wait_for
from tests.workers.test_worker_process import no_run_left_running, study_done
from workers.infra.settings import WorkerSettings
from workers.query import api
from workers.tracking import Tracker


def rank_processes(parent: int) -> list[int]:
    """Pids of the rank processes ``parent`` started (``python -m cbscore.train.distributed``)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if ppid == parent and b"cbscore.train.distributed" in cmdline:
            pids.append(int(entry))
    return pids


@pytest.mark.slow
def test_a_killed_rank_costs_the_attempt_and_the_trial_resumes_on_two_ranks(worker_env, processes, token_store):
    from workers.studies.ledger import Ledger

    name = "ddp"
    worker = processes.worker("--devices-per-trial", "2")
    spec = tiny_spec(name, batch_sizes=[8], settings=[{"model": "tiny-0.1M", "tokens": 60_000}])
    api.launch_study(spec)
    s = WorkerSettings.from_env()
    tracker, ledger = Tracker(s.tracking_uri), Ledger(s.ledger_url)
    [record] = api.study_records(name)
    ckpt = Path(worker_env["CBS_HOME"]) / "checkpoints" / record.trial_id / "checkpoint.pt"
    wait_for(lambda: ckpt.exists() and tracker.get_run(record.run_id).data.metrics.get("progress/step", 0) >= 30,
             180, what=lambda: "a checkpoint past step 30\n" + processes.log(worker)[-3000:])
    rank0 = int(ledger.lease(record.trial_id).owner.rsplit(":", 1)[1])  # the trial's child is rank 0
    [rank1] = rank_processes(rank0)
    os.kill(rank1, signal.SIGKILL)
    wait_for(lambda: study_done(name), 240, every_s=1, what=lambda: "the resumed trial\n" + processes.log(worker)[-3000:])
    [record] = api.study_records(name)
    run = tracker.get_run(record.run_id)
    assert (record.status, record.attempt, run.info.status) == ("finished", 2, "FINISHED")
    assert int(run.data.tags["resumed_from_step"]) > 0  # from its checkpoint, not from scratch
    # the spec said one device (params); the worker's --devices-per-trial ran it on two ranks
    assert run.data.params["devices"] == "1" and run.data.tags["device"].endswith("× 2")
    assert "RankFailed: rank 1 (pid" in processes.log(worker) or ledger.lease(record.trial_id).attempt == 2
    steps, _ = tracker.history(run, "train/loss")
    # One curve to the budget: the reference run trains (1 + budget_margin)·D, 1.25 · 60k / (8·16) = 585 steps.
    budget = int(int((1 + spec.budget_margin) * 60_000) / (8 * spec.context_tokens))
    assert steps[-1] == budget and len(steps) == len(set(steps))
    no_run_left_running(name)

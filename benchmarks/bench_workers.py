"""What the workers' bookkeeping costs: ledger compare-and-sets, MLflow flushes, the app's reads of
a large study, and how fast a worker picks up a task from the embedded (filesystem) broker.

Reads: ``cold`` is a process's first read (every run fetched, no history cached); ``warm`` is a
later refresh (only runs still scheduled or running, or ended since, are fetched; ended runs'
histories are cached) — what a page pays every few seconds.

Everything runs against real stores in a temporary folder (SQLite MLflow in WAL mode, the SQLite
ledger, the filesystem broker) and a real ``cbs worker`` process for the pickup latency.

    .venv/bin/python benchmarks/bench_workers.py [--trials 500] [--tasks 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _ms(samples: list[float]) -> dict:
    return {"median_ms": round(1000 * statistics.median(samples), 2), "max_ms": round(1000 * max(samples), 2),
            "n": len(samples)}


def bench_ledger(url: str, n: int = 200) -> dict:
    from workers.studies.ledger import Ledger

    ledger = Ledger(url)
    create, claim, beat, finish = [], [], [], []
    for i in range(n):
        tid = f"bench.t{i}"
        t0 = time.perf_counter()
        ledger.create(tid, "bench", "cpu", owner="r:1", now_s=0.0, stale_after_s=60)
        ledger.mark_queued(tid, run_id="x", owner="r:1", now_s=0.0)
        t1 = time.perf_counter()
        ledger.claim(tid, 1, owner="w:1", worker="cpu@h", now_s=1.0)
        t2 = time.perf_counter()
        ledger.beat(tid, 1, "w:1", 2.0)
        t3 = time.perf_counter()
        ledger.finish(tid, 1, owner="w:1", outcome="reached", now_s=3.0)
        t4 = time.perf_counter()
        create.append(t1 - t0), claim.append(t2 - t1), beat.append(t3 - t2), finish.append(t4 - t3)
    return {"create+queue": _ms(create), "claim": _ms(claim), "heartbeat": _ms(beat), "finish": _ms(finish)}


def seed_study(n_trials: int) -> str:
    """A study of ``n_trials`` ended trial runs written the way the runner and a worker write them
    (nothing is enqueued: the pickup benchmark wants an empty queue)."""
    from cbscore.study import StudySpec
    from workers.infra.settings import WorkerSettings
    from workers.tracking import Tracker, metric

    lrs = [round(1e-3 * 1.01 ** i, 8) for i in range(max(1, n_trials // 4))]
    spec = StudySpec.from_dict({
        "name": "bench", "kind": "custom", "settings": [{"model": "tiny-0.1M", "tokens": 15_000}],
        "batch_sizes": [4, 8, 16, 32], "b_ref": 8, "context_tokens": 16, "search": {"kind": "grid", "lrs": lrs},
        "data": {"source": "builtin", "vocab_size": 320}, "max_trials": 100_000})
    s = WorkerSettings.from_env()
    tracker = Tracker(s.tracking_uri, s.artifact_root)
    exp_id, parent_id = tracker.create_study("bench", spec_dict=spec.to_dict(), spec_yaml=spec.to_yaml(),
                                             params={"b_ref": 8, "context_tokens": 16}, tags={"kind": "custom"})
    tracker.set_tags(parent_id, {"target/tiny-0.1M_D15K": "4.0"})
    for i in range(n_trials):
        b = (4, 8, 16, 32)[i % 4]
        role = "reference" if b == 8 else "trial"
        run_id = tracker.create_trial(exp_id, parent_id, trial_id=f"bench.t{i}", tags={
            "study": "bench", "setting": "tiny-0.1M_D15K", "cell": f"tiny-0.1M_D15K.b{b}", "batch_size": str(b),
            "lr": repr(lrs[i // 4 % len(lrs)]), "role": role, "n_params": "98304", "setting_tokens": "15000",
            "context_tokens": "16"}, params={"lr": lrs[i // 4 % len(lrs)], "batch_size": b})
        steps = list(range(0, 120, 3))
        ms = [metric("eval/loss_ewa", 6.0 - 0.02 * k, k) for k in steps]
        ms += [metric("train/loss", 6.0 - 0.02 * k, k) for k in steps]
        ms += [metric("progress/step", 117, 117), metric("progress/tokens", 117 * b * 16, 117)]
        if role == "trial":
            ms.append(metric("summary/steps_to_target", 100.0 + i % 7, 117))
        tracker.log_metrics(run_id, ms)
        tracker.end_trial(run_id, "finished" if role == "reference" else "reached")
    # The summary the runner writes on every pass (the studies list reads it instead of every trial).
    tracker.set_tags(parent_id, {"counts": json.dumps({"finished": n_trials // 4, "reached": n_trials - n_trials // 4}),
                                 "tokens_spent": str(n_trials * 117 * 16 * 16), "status": "done"})
    return "bench"


def bench_reads(name: str, repeat: int = 3) -> dict:
    from workers.query import api
    from workers.tracking import Tracker

    # Steady state: the study's runs ended long ago (by default a run is re-read for 30 s after it
    # ends, for clock skew between hosts; the seeding just ended them all).
    Tracker.ENDED_SLACK_MS = 0
    out = {}
    run_id = api.study_records(name)[0].run_id
    for label, fn in (("list_studies", api.list_studies), ("study_records", lambda: api.study_records(name)),
                      ("study_table", lambda: api.study_table(name)),
                      ("study_status", lambda: api.study_status(name)),
                      ("trial_curve", lambda: api.trial_curve(run_id))):
        Tracker._HISTORY.clear()
        Tracker._ENDED.clear()
        t0 = time.perf_counter()
        fn()
        cold = time.perf_counter() - t0
        warm = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            warm.append(time.perf_counter() - t0)
        out[label] = {"cold_ms": round(1000 * cold, 1), "warm_median_ms": round(1000 * statistics.median(warm), 1)}
    return out


def bench_flush(n: int = 50) -> dict:
    from workers.infra.settings import WorkerSettings
    from workers.tracking import Tracker, metric

    s = WorkerSettings.from_env()
    tracker = Tracker(s.tracking_uri, s.artifact_root)
    exp_id, parent_id = tracker.create_study("flush", spec_dict={"name": "flush"}, spec_yaml="", params={}, tags={})
    run_id = tracker.create_trial(exp_id, parent_id, trial_id="flush.t", tags={}, params={})
    samples = []
    for step in range(n):
        batch = [metric(k, 1.0, step) for k in ("train/loss", "optim/lr", "perf/tokens_per_s", "heartbeat",
                                                  "progress/step", "progress/tokens", "eval/loss_ewa", "eval/loss_raw")]
        t0 = time.perf_counter()
        tracker.log_metrics(run_id, batch)
        samples.append(time.perf_counter() - t0)
    return {"log_batch_8_metrics": _ms(samples)}


def bench_pickup(n_tasks: int, folder: Path) -> dict:
    """Seconds from ``send_task`` to the worker's "received" line (filesystem broker, polled at
    CBS_BROKER_POLL_S), for tasks sent one at a time to an idle worker."""
    from workers.infra.broker import TRIAL_TASK, app

    cbs = str(Path(sys.executable).parent / "cbs")
    log_path = folder / "worker.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([cbs, "worker"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 120
        while "ready." not in log_path.read_text():
            if time.time() > deadline:
                raise RuntimeError("worker did not start:\n" + log_path.read_text()[-2000:])
            time.sleep(0.2)
        sent = {}
        for i in range(n_tasks):
            tid = f"pickup{i}-a1"
            time.sleep(1.0)  # the pool has forked its next child: the worker is idle, polling
            sent[tid] = time.time()
            app.send_task(TRIAL_TASK, args=["x", f"pickup{i}", 1], task_id=tid, queue="cpu")
            deadline = time.time() + 60
            while f"[{tid}] succeeded" not in log_path.read_text():
                if time.time() > deadline:
                    raise RuntimeError("task did not finish:\n" + log_path.read_text()[-2000:])
                time.sleep(0.05)
        pattern = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): INFO/MainProcess\] Task \S+\[(\S+)\] received")
        delays = []
        for stamp, tid in pattern.findall(log_path.read_text()):
            received = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
            delays.append(received - sent[tid])
        return {"send_to_received": _ms(delays)}
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=500, help="trial runs in the seeded study")
    parser.add_argument("--tasks", type=int, default=10, help="tasks for the pickup latency (0: skip)")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        folder = Path(tmp)
        os.environ.update(CBS_HOME=str(folder / "home"), CBS_TRACKING_URI=f"sqlite:///{folder / 'mlflow.db'}",
                          MLFLOW_DISABLE_TELEMETRY="true")
        from workers.tracking import prepare_store

        prepare_store(os.environ["CBS_TRACKING_URI"])
        results = {"ledger_sqlite": bench_ledger(f"sqlite:///{folder / 'bench-ledger.db'}"),
                   "mlflow_flush": bench_flush()}
        t0 = time.perf_counter()
        name = seed_study(args.trials)
        results["seed_s"] = round(time.perf_counter() - t0, 1)
        results[f"reads_{args.trials}_trials"] = bench_reads(name)
        if args.tasks:
            results["broker_pickup"] = bench_pickup(args.tasks, folder)
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

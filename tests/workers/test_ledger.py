"""The ledger's compare-and-set rules: one holder per attempt, a dead holder is seen, one
creator per trial, and the study lock hands a missed pass to its holder."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from workers.studies.ledger import Ledger, WorkerRow, owner_is_dead, this_process


@pytest.fixture
def ledger(tmp_path):
    return Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")


def queued(ledger: Ledger, trial_id: str = "s.t1") -> None:
    assert ledger.create(trial_id, "s", "cpu", owner="runner:1", now_s=0.0, stale_after_s=60)
    assert ledger.mark_queued(trial_id, run_id="run1", owner="runner:1", now_s=0.0)


def test_exactly_one_of_many_creators_wins(ledger):
    with ThreadPoolExecutor(8) as pool:
        wins = list(pool.map(lambda i: ledger.create("s.t1", "s", "cpu", owner=f"r:{i}", now_s=10.0,
                                                     stale_after_s=60), range(8)))
    assert wins.count(True) == 1
    # A creator that died half-way (lease stuck in "creating") is taken over once stale, by one caller.
    assert not ledger.create("s.t1", "s", "cpu", owner="late:1", now_s=30.0, stale_after_s=60)
    assert ledger.create("s.t1", "s", "cpu", owner="late:1", now_s=100.0, stale_after_s=60)
    assert ledger.lease("s.t1").owner == "late:1"


def test_an_attempt_is_claimed_once_and_only_while_current(ledger):
    queued(ledger)
    assert ledger.claim("s.t1", 1, owner="w:1", worker="cpu@h", now_s=1.0)
    assert not ledger.claim("s.t1", 1, owner="w:2", worker="cpu@h", now_s=1.0)  # a duplicate message
    assert not ledger.requeue("s.t1", 1, now_s=2.0, stale_before_s=0.5)  # beat at 1.0: not lost (any more)
    assert ledger.requeue("s.t1", 1, now_s=2.0, stale_before_s=1.5)  # lost: attempt 2 is queued
    assert not ledger.requeue("s.t1", 1, now_s=2.0, stale_before_s=1.5)  # a second runner does nothing
    lease = ledger.lease("s.t1")
    assert (lease.state, lease.attempt, lease.owner) == ("queued", 2, None)
    assert not ledger.claim("s.t1", 1, owner="w:3", worker="cpu@h", now_s=3.0)  # the stale a1 task
    held, _ = ledger.beat("s.t1", 1, "w:1", 3.0)  # the old holder learns it was superseded
    assert not held
    assert ledger.claim("s.t1", 2, owner="w:4", worker="cpu@h", now_s=3.0)
    assert ledger.finish("s.t1", 2, owner="w:4", outcome="reached", now_s=4.0)
    assert not ledger.finish("s.t1", 2, owner="w:4", outcome="failed", now_s=5.0)
    assert not ledger.claim("s.t1", 2, owner="w:5", worker="cpu@h", now_s=5.0)  # never run again
    assert ledger.lease("s.t1").outcome == "reached"


def test_stop_reason_reaches_the_holder_first_reason_wins(ledger):
    queued(ledger)
    assert ledger.claim("s.t1", 1, owner="w:1", worker="cpu@h", now_s=1.0)
    assert ledger.beat("s.t1", 1, "w:1", 2.0) == (True, None)
    assert ledger.request_stop("s.t1", "pruned")
    assert not ledger.request_stop("s.t1", "cancelled")
    assert ledger.beat("s.t1", 1, "w:1", 3.0) == (True, "pruned")
    assert ledger.lease("s.t1").heartbeat_s == 3.0


def test_a_queued_trial_cancels_at_once(ledger):
    queued(ledger)
    assert ledger.end_queued("s.t1", outcome="stopped", now_s=1.0)
    assert not ledger.claim("s.t1", 1, owner="w:1", worker="cpu@h", now_s=2.0)


def test_a_killed_process_is_seen_dead_a_live_one_is_not():
    assert not owner_is_dead(this_process())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    owner = this_process().rsplit(":", 1)[0] + f":{child.pid}"
    assert not owner_is_dead(owner)
    child.kill()
    time.sleep(0.2)  # not reaped yet: a zombie counts as dead
    assert owner_is_dead(owner)
    child.wait()
    assert owner_is_dead(owner)
    assert not owner_is_dead(f"another-host:{child.pid}")  # other hosts: only the heartbeat decides


def test_a_dead_holder_is_lost_at_once_and_at_the_cap_fails(ledger):
    queued(ledger)
    assert ledger.claim("s.t1", 1, owner="h:111", worker="cpu@h", now_s=10.0)
    assert not ledger.fail_lost("s.t1", 1, now_s=11.0, stale_before_s=5.0, dead_owner="h:999")
    assert ledger.fail_lost("s.t1", 1, now_s=11.0, stale_before_s=5.0, dead_owner="h:111")
    lease = ledger.lease("s.t1")
    assert (lease.state, lease.outcome) == ("done", "failed")


def test_take_over_from_a_dead_holder_bumps_the_attempt(ledger):
    queued(ledger)
    assert ledger.claim("s.t1", 1, owner="h:111", worker="cpu@h", now_s=1.0)
    assert not ledger.take_over("s.t1", 1, dead_owner="h:999", owner="h:2", worker="cpu@h", now_s=2.0)
    assert ledger.take_over("s.t1", 1, dead_owner="h:111", owner="h:2", worker="cpu@h", now_s=2.0)
    assert not ledger.take_over("s.t1", 1, dead_owner="h:111", owner="h:3", worker="cpu@h", now_s=2.0)
    lease = ledger.lease("s.t1")
    assert (lease.attempt, lease.owner, lease.state) == (2, "h:2", "running")


def test_study_lock_marks_a_missed_pass_for_the_holder(ledger):
    assert ledger.try_lock("s", "a", now_s=0.0, ttl_s=60)
    assert not ledger.try_lock("s", "b", now_s=1.0, ttl_s=60)  # b asked meanwhile: dirty
    assert not ledger.unlock("s", "a")  # a must run another pass
    assert ledger.try_lock("s", "a", now_s=2.0, ttl_s=60)  # re-entrant, clears the flag
    assert ledger.unlock("s", "a")
    assert ledger.try_lock("s", "b", now_s=3.0, ttl_s=60)
    assert ledger.try_lock("s", "c", now_s=100.0, ttl_s=60)  # b's lock expired


def test_worker_presence_expires(ledger):
    row = WorkerRow(nodename="cpu-1@h", hostname="h", pid=1, device="cpu", queue="cpu", concurrency=1,
                    started_s=0.0, heartbeat_s=100.0)
    ledger.worker_beat(row)
    ledger.worker_beat(row)  # an update, not a second row
    assert [w.nodename for w in ledger.workers(now_s=105.0, stale_after_s=10)] == ["cpu-1@h"]
    assert ledger.workers(now_s=111.0, stale_after_s=10) == []
    ledger.worker_gone("cpu-1@h")
    assert ledger.workers(now_s=100.0, stale_after_s=10) == []


def _free_pid() -> int:
    """A pid no process of this namespace has (above every live one, under pid_max)."""
    live = {int(p) for p in os.listdir("/proc") if p.isdigit()}
    return max(live) + 500


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0,
                    reason="needs unshare and root to make a PID namespace")
def test_a_live_trial_in_another_pid_namespace_is_not_judged_dead():
    """Two containers with one hostname: a holder alive in its own PID namespace has a pid that
    names no process here. It must not be judged dead (issue 12, item 5)."""
    pid = _free_pid()
    code = ("from workers.studies.ledger import this_process; import time; "
            "print(this_process(), flush=True); time.sleep(60)")
    # In a new PID namespace, ns_last_pid makes the next child get exactly ``pid``.
    script = (f"echo {pid - 1} > /proc/sys/kernel/ns_last_pid && "
              f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}")
    holder = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "sh", "-c", script],
                              stdout=subprocess.PIPE, text=True, cwd=str(Path(__file__).parents[2]),
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    try:
        owner = holder.stdout.readline().strip()
        assert owner.endswith(f":{pid}"), owner
        assert not Path(f"/proc/{pid}").exists()  # that pid is nobody here...
        assert socket.gethostname() in owner
        assert not owner_is_dead(owner)  # ...but its holder lives elsewhere: only the heartbeat decides
    finally:
        holder.kill()
        holder.wait()


def test_a_lost_attempt_costs_a_strike_only_without_a_new_checkpoint(ledger):
    """Issue 42: kills from outside after a checkpoint cost nothing; a trial that dies each time
    before it gets further (its own fault) spends the attempt cap. Checkpoints only move forward."""
    queued(ledger)
    assert ledger.claim("s.t1", 1, owner="h:1", worker="cpu@h", now_s=1.0)
    assert ledger.lease("s.t1").charged_if_lost() == 1  # nothing saved yet: a loss now would count
    assert ledger.beat("s.t1", 1, "h:1", 2.0, checkpoint_step=40) == (True, None)
    lease = ledger.lease("s.t1")
    assert (lease.checkpoint_step, lease.progressed, lease.charged_if_lost()) == (40, True, 0)
    assert ledger.requeue("s.t1", 1, now_s=3.0, stale_before_s=0.0, dead_owner="h:1")
    lease = ledger.lease("s.t1")
    assert (lease.attempt, lease.strikes, lease.resumed_step, lease.progressed) == (2, 0, 40, False)
    # attempt 2 resumes from step 40 and dies before its next checkpoint: a strike
    assert ledger.claim("s.t1", 2, owner="h:2", worker="cpu@h", now_s=4.0)
    assert ledger.beat("s.t1", 2, "h:2", 5.0, checkpoint_step=30) == (True, None)  # an older one: ignored
    assert ledger.lease("s.t1").checkpoint_step == 40
    assert ledger.take_over("s.t1", 2, dead_owner="h:2", owner="h:3", worker="cpu@h", now_s=6.0)
    lease = ledger.lease("s.t1")
    assert (lease.attempt, lease.strikes, lease.charged_if_lost()) == (3, 1, 2)
    assert lease.lost_reason(2) == ("lost its worker 3 times, 2 of them before saving a checkpoint past the "
                                    "furthest one (CBS_MAX_ATTEMPTS=2 counts those)")
    # attempt 3 saves past step 40: a loss now is free again
    assert ledger.beat("s.t1", 3, "h:3", 7.0, checkpoint_step=41) == (True, None)
    assert ledger.lease("s.t1").charged_if_lost() == 1


def test_a_give_back_that_undoes_a_requeue_takes_its_strike_back(ledger):
    queued(ledger)
    assert ledger.claim("s.t1", 1, owner="h:1", worker="cpu@h", now_s=1.0)
    # the holder was cut off from the ledger; the runner took it for lost (no checkpoint: a strike)
    assert ledger.requeue("s.t1", 1, now_s=100.0, stale_before_s=50.0)
    assert (ledger.lease("s.t1").attempt, ledger.lease("s.t1").strikes) == (2, 1)
    assert ledger.give_back("s.t1", 1, owner="h:1", now_s=101.0)  # the outage, not the trial: undone
    lease = ledger.lease("s.t1")
    assert (lease.attempt, lease.state, lease.strikes, lease.last_strike) == (1, "queued", 0, 0)
    lost_without_progress = lease.lost_reason(3)
    assert lost_without_progress == "lost its worker 1 times (CBS_MAX_ATTEMPTS=3)"


def test_a_ledger_made_before_the_strike_count_gets_it_with_earlier_losses_counted(tmp_path):
    """A lab upgraded mid-study: its leases' earlier losses count as they did before (attempt - 1)."""
    import sqlalchemy as sa

    url = f"sqlite:///{tmp_path / 'old.db'}"
    old = sa.create_engine(url)
    with old.begin() as conn:  # the table as it shipped before issue 42's columns
        conn.exec_driver_sql(
            "CREATE TABLE cbs_trial_leases (trial_id VARCHAR(255) PRIMARY KEY, study VARCHAR(64) NOT NULL, "
            "run_id VARCHAR(64), attempt INTEGER NOT NULL, state VARCHAR(16) NOT NULL, owner VARCHAR(255), "
            "worker VARCHAR(255), queue VARCHAR(16), heartbeat_s FLOAT, sent_s FLOAT, updated_s FLOAT NOT NULL, "
            "stop_reason VARCHAR(64), outcome VARCHAR(16))")
        conn.exec_driver_sql("INSERT INTO cbs_trial_leases (trial_id, study, attempt, state, owner, updated_s) "
                             "VALUES ('s.t1', 's', 3, 'running', 'h:1', 0.0)")
    old.dispose()
    lease = Ledger(url).lease("s.t1")
    assert (lease.attempt, lease.strikes, lease.checkpoint_step, lease.charged_if_lost()) == (3, 2, None, 3)
    assert Ledger(url).lease("s.t1").strikes == 2  # opened again: nothing added twice

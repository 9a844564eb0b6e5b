"""One attempt of one trial, in a worker's child process (the body of the ``run_trial`` task).

1. Claim the lease for exactly this attempt (``queued → running``). A task whose attempt is not
   the current one, or whose trial already ended or is held by a live process, exits without
   training. A redelivered task whose previous holder died on this host takes the trial over as
   the next attempt, or ends it ``failed`` at the attempt cap (``CBS_MAX_ATTEMPTS``).
2. Train through :func:`cbscore.train.trainer.train` with the MLflow callback and a stop watch; a
   heartbeat thread stamps the lease every ``CBS_HEARTBEAT_S`` and reads its stop reason. The
   trial resumes from ``<checkpoint root>/<trial_id>`` (``CBS_CHECKPOINT_DIR``, else
   ``$CBS_HOME/checkpoints``) when a checkpoint is there.
3. Record the outcome: the MLflow run first, with all its tags (FINISHED / KILLED / FAILED), then
   the lease (only the holder of the attempt can), then Optuna; delete the checkpoint; advance
   the study. A run that cannot be ended gives the attempt back (the lease is not done yet), and
   the next attempt ends it from the result its checkpoint holds. The heartbeat fails closed: cut
   off from the ledger past its deadline, the holder stops and writes nothing more, then gives
   the same attempt back once the ledger answers: an outage never costs an attempt.

An exception in training ends the trial ``failed`` (run FAILED) and is re-raised, never
swallowed; it is not retried (only a lost worker is). A tracking or database error is not the
trial's fault, nor is a full disk (:func:`workers.tracking.is_out_of_resources`): after the
tracker's own retries (:func:`workers.tracking.retrying`) the holder gives the *same* attempt back
to the queue (``release``; the run's ``given_back`` tag says why) and a later attempt resumes from the
checkpoint, which holds the result when training had already ended. So is a host that cannot see
the study's token store, or holds another copy of it (:mod:`workers.studies.stores`): the attempt goes back
without counting against ``CBS_MAX_GIVE_BACKS``, for a host that has the store. A task killed at the hard
time limit (``CBS_TRIAL_TIME_LIMIT_S``) ends ``failed`` from the worker's parent
(:func:`end_after_time_limit`) instead of looking like a lost worker. Every terminal transition
removes the trial's checkpoint folder (:mod:`workers.infra.checkpoints`). A shutdown is not a failure: SIGTERM (or the
worker's shutdown hook, through the lease) stops the trainer at the next step with a checkpoint
and the same attempt goes back to the queue; a harder interrupt (SystemExit, KeyboardInterrupt)
puts it back too, to resume from the last periodic checkpoint.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from cbscore.train.callbacks import Callback, TrainState
from workers.infra.checkpoints import checkpoint_dir, remove_checkpoint
from workers.infra.settings import WorkerSettings
from workers.studies.ledger import INTERRUPTED, Ledger, owner_is_dead, this_process
from workers.studies.stores import OUT_OF_ROOM_PREFIX, StoreUnavailable, hold_slot, ready_store
from workers.tracking import (
    LeaseUnknown,
    MlflowCallback,
    Tracker,
    is_out_of_resources,
    is_transient,
    result_tags,
    wait_out,
)

_log = logging.getLogger(__name__)


class Heartbeat:
    """A daemon thread that stamps the lease and reads its stop reason every ``period_s``.

    Fencing fails closed: a holder that cannot reach the ledger for ``deadline_s`` (by default
    three quarters of ``CBS_STALE_AFTER_S``, before the runner may give the trial to another
    attempt) counts as superseded: it stops and writes no checkpoint. It is then ``cut_off`` (not
    told by the ledger that it lost the trial): an outage, not a fault of the trial, so the attempt
    is given back once the ledger answers again (:meth:`Attempt.give_back`), never lost."""

    def __init__(self, ledger: Ledger, trial_id: str, attempt: int, owner: str, period_s: float,
                 deadline_s: float | None = None):
        self.ledger, self.trial_id, self.attempt, self.owner = ledger, trial_id, attempt, owner
        self.period_s = period_s
        self.deadline_s = deadline_s if deadline_s is not None else 3 * period_s
        self.superseded = False
        #: Superseded for want of the ledger (past ``deadline_s``), not by the ledger's answer.
        self.cut_off = False
        #: The last error the ledger answered with (why this holder was cut off).
        self.last_error: Exception | None = None
        self.stop_reason: str | None = None
        self.last_held = time.monotonic()
        #: The furthest step this holder saved a checkpoint at, sent with every beat (the attempt cap
        #: counts a lost attempt only if it saved none past the furthest before it: ledger docstring).
        self.checkpoint_step: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cbs-heartbeat", daemon=True)

    def beat(self) -> bool:
        """Stamp the lease; True when the ledger answered that this attempt still holds it."""
        try:
            held, reason = self.ledger.beat(self.trial_id, self.attempt, self.owner, time.time(),
                                            checkpoint_step=self.checkpoint_step)
        except Exception as exc:  # the ledger is unreachable: try again next period, up to the deadline
            self.last_error = exc
            out_s = time.monotonic() - self.last_held
            _log.warning(f"cbs trial {self.trial_id}: heartbeat failed ({out_s:.0f} s without the ledger): {exc}")
            if out_s > self.deadline_s and not self.superseded:
                _log.warning(f"cbs trial {self.trial_id}: no ledger for {self.deadline_s:g} s: this attempt stops "
                             "writing and gives the attempt back when the ledger answers")
                self.superseded = self.cut_off = True
            return False
        if not held:
            self.superseded = True
        else:
            self.last_held = time.monotonic()
        if reason:
            self.stop_reason = reason
        return held and not self.superseded

    def holds(self) -> bool | None:
        """Ask the ledger now (the fence of every metric write, :class:`workers.tracking.MlflowCallback`):
        True while this attempt holds the trial, False once it lost it (or was cut off), None while
        the ledger cannot say."""
        if self.superseded:
            return False
        if self.beat():
            return True
        return False if self.superseded else None

    def confirm(self) -> bool:
        """Ask the ledger now whether this attempt still holds the trial, waiting out an outage up
        to the deadline (then the holder is ``cut_off``): True when it does."""
        while not self.beat():
            if self.superseded:
                return False
            time.sleep(min(1.0, self.period_s))
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.beat()

    def checkpointed(self, step: int) -> None:
        """A checkpoint at ``step`` was written: tell the ledger now (the next beats repeat it)."""
        self.checkpoint_step = step if self.checkpoint_step is None else max(self.checkpoint_step, step)
        self.beat()

    def interrupt(self) -> None:
        """The worker is going away: stop at the next step (unless another stop was asked first)."""
        if not self.stop_reason:
            self.stop_reason = INTERRUPTED

    def start(self) -> Heartbeat:
        """One beat now (a stop asked before the trial started is seen at once), then the thread."""
        self.beat()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class StopWatch(Callback):
    """Asks the trainer to stop when the lease says so (pruned, cancelled) or was taken away."""

    def __init__(self, heartbeat: Heartbeat):
        self.heartbeat = heartbeat

    def _check(self, state: TrainState) -> None:
        if self.heartbeat.superseded:
            state.request_stop("superseded")
        elif self.heartbeat.stop_reason:
            state.request_stop(self.heartbeat.stop_reason)

    def pre_train(self, state: TrainState) -> None:
        self._check(state)

    def post_step(self, state: TrainState, metrics) -> None:
        self._check(state)

    def may_checkpoint(self, state: TrainState) -> bool:
        """Ask the ledger now (not at the last beat) whether this attempt still holds the trial: a
        superseded holder must never write a checkpoint the new holder would resume from, nor one
        after the trial ended and its folder was removed."""
        return self.heartbeat.beat()  # False too when the ledger cannot say (fails closed)

    def post_checkpoint(self, state: TrainState) -> None:
        self.heartbeat.checkpointed(state.step)


def _operational(trial_id: str, train_config: dict, study: str = "") -> dict:
    """Fields that change how the trial runs here, not what it computes (the checkpoint allows them):
    the checkpoint folder and period, the device, threads, this worker's devices per trial, and a
    local study's snapshot folders on this host (:func:`workers.studies.local_study.host_paths`)."""
    from workers.studies.local_study import host_paths
    from workers.trials.devices import trial_devices

    out: dict = {**trial_devices(train_config), **(host_paths(study, train_config) if study else {}),
                 "checkpoint_dir": checkpoint_dir(trial_id),
                 "checkpoint_every_seconds": float(os.environ.get("CBS_CHECKPOINT_EVERY_S") or 300.0)}
    device = os.environ.get("CBS_TRIAL_DEVICE")
    if device:
        out["device"] = device
    threads = os.environ.get("CBS_TORCH_THREADS")
    if threads:
        out["threads"] = int(threads)
    return out


def run_trial_attempt(study: str, trial_id: str, attempt: int, *, worker: str = "",
                      settings: WorkerSettings | None = None) -> dict:
    """Run ``attempt`` of ``trial_id`` if it is ours to run; returns a JSON summary."""
    s = settings or WorkerSettings.from_env()
    owner = this_process()
    # before the claim nothing is held: a ledger that is down is waited out (a restart)
    ledger = wait_out(lambda: Ledger(s.ledger_url), what=f"trial {trial_id}")
    lease = wait_out(lambda: ledger.lease(trial_id), what=f"trial {trial_id}")
    if lease is None:
        return {"trial_id": trial_id, "attempt": attempt, "skipped": "no lease (unknown trial)"}
    if not ledger.claim(trial_id, attempt, owner=owner, worker=worker, now_s=time.time()):
        lease = ledger.lease(trial_id)
        dead = lease.state == "running" and lease.attempt == attempt and owner_is_dead(lease.owner)
        if not dead:
            return {"trial_id": trial_id, "attempt": attempt,
                    "skipped": f"lease is {lease.state} at attempt {lease.attempt}"}
        if lease.charged_if_lost() >= s.max_attempts:
            # the dead holder's attempt ends the trial: it is failed in that holder's name
            held = Attempt(settings=s, ledger=ledger, study=study, trial_id=trial_id, number=lease.attempt,
                           owner=lease.owner, run_id=lease.run_id)
            held.fail(lease.lost_reason(s.max_attempts))
            return held.summary(outcome="failed")
        if not ledger.take_over(trial_id, attempt, dead_owner=lease.owner, owner=owner, worker=worker,
                                now_s=time.time()):
            return {"trial_id": trial_id, "attempt": attempt, "skipped": "another process took it over"}
        attempt += 1
    lease = ledger.lease(trial_id)
    return Attempt(settings=s, ledger=ledger, study=study, trial_id=trial_id, number=attempt, owner=owner,
                   run_id=lease.run_id, worker=worker).run()


@dataclass(kw_only=True, eq=False)
class Attempt:
    """Attempt ``number`` of ``trial_id``, held by ``owner``: trains it, then ends it one way, each
    a method: :meth:`finish` (an outcome), :meth:`fail`, :meth:`give_back` (the same attempt back to
    the queue: an outage, a full disk, a host without the store), :meth:`requeue` (the worker shuts
    down), :meth:`lose` (a rank died: the next attempt). Only the holder of the attempt can move its
    lease (the ledger checks ``owner``)."""

    settings: WorkerSettings
    """The worker's settings (ledger, tracking, caps, heartbeat period)."""
    ledger: Ledger
    """The lab's ledger of leases."""
    study: str
    """The study's name."""
    trial_id: str
    """The trial's id."""
    number: int
    """Which attempt of the trial this is (1, 2, …)."""
    owner: str
    """The process that holds the lease (:func:`workers.studies.ledger.this_process`)."""
    run_id: str
    """The trial's MLflow run."""
    worker: str = ""
    """The worker's name, tagged on the run."""
    mlflow_run: Any = None
    """The MLflow run once read (its tags carry the queue and what Optuna is told); ``None`` before."""
    _tracker: Tracker | None = field(default=None, repr=False)

    @property
    def tracker(self) -> Tracker:
        if self._tracker is None:
            self._tracker = Tracker(self.settings.tracking_uri, self.settings.artifact_root)
        return self._tracker

    def summary(self, **fields) -> dict:
        """The task's JSON summary of this attempt."""
        return {"trial_id": self.trial_id, "attempt": self.number, **fields}

    def run(self) -> dict:
        """Read the run, train, and end the attempt (see the module docstring)."""
        from workers.studies.records import trial_spec

        s = self.settings
        # Beat from the claim on: reading the run and importing the trainer can take longer than the
        # staleness limit on a loaded machine.
        heartbeat = Heartbeat(self.ledger, self.trial_id, self.number, self.owner, s.heartbeat_s,
                              deadline_s=0.75 * s.stale_after_s).start()
        run = None
        try:
            run = self.tracker.get_run(self.run_id)
            spec = trial_spec(run)
            self.tracker.set_trial_status(self.run_id, "running", attempt=self.number, worker=self.worker,
                                          pid=os.getpid(), given_back="")
        except Exception as exc:
            # Before training: a store that is down costs no attempt (sent to the default queue: the
            # run's tags are not taken as read); anything else fails the trial now instead of leaving
            # a lease that looks lost (and burns every attempt in seconds).
            heartbeat.stop()
            if is_transient(exc):
                return self.give_back(exc, cut_off=heartbeat.cut_off)
            self.mlflow_run = run
            self.fail(f"{type(exc).__name__}: {exc}"[:500], best_effort=True)
            raise
        self.mlflow_run = run
        # SIGTERM (the pool stopping its children, a process-group kill) becomes a stop at the next
        # step with a checkpoint, then the same attempt goes back to the queue.
        on_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, lambda *_: heartbeat.interrupt()) if on_main else None
        from cbscore.train.distributed import RankFailed

        try:
            from cbscore.train.config import TrainConfig
            from cbscore.train.trainer import train

            config = TrainConfig.from_dict({**spec.train_config,
                                            **_operational(self.trial_id, spec.train_config, self.study)})
            ready_store(self.ledger, self.study, config.data)  # the study's one store, here; never a second one
            callbacks = [MlflowCallback(self.tracker, self.run_id, flush_s=s.heartbeat_s, fence=heartbeat.holds),
                         StopWatch(heartbeat)]
            result = train(config, callbacks)
        except RankFailed as exc:  # another rank of the trial died: this attempt is lost, not the trial
            heartbeat.stop()
            return self.lose(exc)
        except (KeyboardInterrupt, SystemExit):  # interrupted harder: resume from the last checkpoint
            heartbeat.stop()
            if not heartbeat.superseded:
                self.release()
            raise
        except BaseException as exc:
            heartbeat.stop()
            # one outage, two symptoms: the holder cut off, or its last flush unable to ask the ledger
            if (isinstance(exc, Exception) and is_transient(exc)
                    and (heartbeat.cut_off or isinstance(exc, LeaseUnknown))):
                return self.give_back(exc, cut_off=True)
            if heartbeat.superseded:
                raise
            if isinstance(exc, Exception) and (is_transient(exc) or isinstance(exc, StoreUnavailable)):
                return self.give_back(exc)
            self.fail(f"{type(exc).__name__}: {exc}"[:500], traceback_text=traceback.format_exc())
            raise
        finally:
            if on_main:
                signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        heartbeat.stop()
        # ask now (waiting out an outage): a holder that lost the trial meanwhile must not end its run
        if heartbeat.superseded or not heartbeat.confirm():
            if heartbeat.cut_off:  # the ledger was away, not the trial at fault: the attempt goes back
                return self.give_back(heartbeat.last_error, cut_off=True)
            return self.summary(skipped="superseded by a newer attempt")
        if result.status == "stopped" and result.stop_reason == INTERRUPTED:
            return self.requeue(result)
        return self.finish(result)

    def finish(self, result) -> dict:
        """End the trial with the trainer's ``result``. Ordered: the run ends with all its tags
        first, then Optuna is told, then the ledger calls the trial done and the checkpoint goes. A
        crash or an outage in between leaves a lease that is not done and a checkpoint holding the
        result: the next attempt ends it the same way (ending and telling twice change nothing).
        Until the ledger is done the planner counts the trial as in flight
        (:func:`workers.studies.records.trial_status`), so an Optuna cell asks for its next trial
        only once the sampler knows how this one ended: the proposals do not depend on timing."""
        outcome = result.status
        if outcome == "stopped":
            outcome = "pruned" if result.stop_reason == "pruned" else "stopped"
        try:
            self.tracker.end_trial(self.run_id, outcome, **result_tags(result), **self._late_config_key())
            tell(self.settings, self.study, self.mlflow_run.data.tags, outcome, result)
            done = self.ledger.finish(self.trial_id, self.number, owner=self.owner, outcome=outcome, now_s=time.time())
        except Exception as exc:
            if is_transient(exc):
                return self.give_back(exc)
            raise
        if done:
            remove_checkpoint(self.trial_id)  # the lease is done: nobody resumes it
            self._keep_for_the_pages()
        _advance(self.study)
        return self.summary(outcome=outcome, steps=result.steps, steps_to_target=result.steps_to_target,
                            resumed_from_step=result.resumed_from_step)

    def fail(self, reason: str, *, best_effort: bool = False, traceback_text: str | None = None) -> bool:
        """End the trial ``failed`` with ``reason``, if this attempt still holds it (True then): the
        ledger first, then the run (with ``traceback_text`` as the attempt's error file), Optuna,
        the checkpoint, the study's next pass. ``best_effort``: the tracking store may be down, so
        an error ending the run is printed (the runner's repair pass ends it from the lease) and
        Optuna is told only if the run was read."""
        if not self.ledger.finish(self.trial_id, self.number, owner=self.owner, outcome="failed", now_s=time.time()):
            return False
        if best_effort:
            try:
                self.tracker.end_trial(self.run_id, "failed", stop_reason=reason)
            except Exception as exc:  # noqa: BLE001 - the runner's repair pass ends it from the lease
                _log.warning(f"cbs trial: could not end run {self.run_id}: {exc}")
            if self.mlflow_run is not None:
                tell(self.settings, self.study, self.mlflow_run.data.tags, "failed", None)
        else:
            self.tracker.end_trial(self.run_id, "failed", stop_reason=reason)
            if traceback_text is not None:
                self.tracker.log_text(self.run_id, traceback_text, f"errors/attempt-{self.number}.txt")
            run = self.mlflow_run if self.mlflow_run is not None else self.tracker.get_run(self.run_id)
            tell(self.settings, self.study, run.data.tags, "failed", None)
        remove_checkpoint(self.trial_id)
        _advance(self.study)
        return True

    def give_back(self, exc: BaseException | None, *, cut_off: bool = False) -> dict:
        """A store was unreachable, a disk full, the ledger away past the heartbeat's deadline
        (``cut_off``: never the trial's fault; the ledger answers again by then, so the trial is sent
        again after a short pause, not a backoff), or this host cannot see the study's token store:
        put the same attempt back in the queue (it costs no attempt; :meth:`Ledger.give_back`, which
        also undoes a requeue the runner made while this holder was cut off) and send it again after a
        pause; the checkpoint (with the result, if training ended) is kept. The ledger is waited out
        for that (``CBS_OUTAGE_WAIT_S``, the bound a trial blocked on an outage keeps its worker).
        Nothing is written into the checkpoint folder before the give-back (on a full disk that write
        fails, and the lease would be stranded). A host without the store holds its slot for the pause
        (:func:`workers.studies.stores.hold_slot`), so the trial goes to a host that has it."""
        s, trial_id = self.settings, self.trial_id
        reason = f"{type(exc).__name__}: {str(exc)[:300]}"
        no_store = isinstance(exc, StoreUnavailable)
        if is_out_of_resources(exc):
            reason = f"{OUT_OF_ROOM_PREFIX} ({reason}); the trial waits for room"
        elif no_store:
            reason = str(exc)[:500]
        elif cut_off:
            reason = f"cut off from the ledger past the heartbeat's deadline ({reason})"
        given = _give_backs(trial_id) + 1
        # a repeated error the store answers may not be an outage after all: fail it at the cap; a
        # ledger outage, a full disk or a host without the token store is never the trial's fault
        # and never counts
        counted = not (cut_off or is_out_of_resources(exc) or no_store)
        if given > s.max_give_backs and counted:
            self.fail(f"gave its attempt back {given - 1} times (CBS_MAX_GIVE_BACKS={s.max_give_backs}); "
                      f"last error {reason}"[:500], best_effort=True)
            return self.summary(outcome="failed")
        tally = f"{given}/{s.max_give_backs}" if counted else f"give-back {given}, a fault of this host: not counted"
        _log.warning(f"cbs trial {trial_id}: {reason}; attempt {self.number} goes back to the queue ({tally})")
        if not wait_out(lambda: self.ledger.give_back(trial_id, self.number, owner=self.owner, now_s=time.time()),
                        what=f"trial {trial_id}: giving attempt {self.number} back",
                        max_wait_s=max(1.0, s.heartbeat_s)):
            return self.summary(skipped="lease lost while giving it back")
        _count_give_back(trial_id, given)
        try:
            # a tracker of its own: the one that failed may be the reason for the give-back
            Tracker(s.tracking_uri, s.artifact_root).set_trial_status(self.run_id, "queued", attempt=self.number,
                                                                      given_back=reason[:250])
        except Exception as tag_exc:  # noqa: BLE001 - the store is down: the runner's pass re-tags it
            _log.warning(f"cbs trial {trial_id}: could not tag the run: {tag_exc}")
        # Back off: 15 s, 30 s, ... up to 10 min between tries of a store that stays down (a ledger
        # that cut this holder off answers again by now: a short pause).
        wait_s = min(600.0, max(15.0, 3 * s.heartbeat_s) * 2 ** (given - 1))
        if cut_off:
            wait_s = max(10.0, 2 * s.heartbeat_s)
        self._send(self.number, countdown_s=wait_s)
        if no_store:
            hold_slot(wait_s)
        return self.summary(requeued=f"store unreachable: {reason}")

    def requeue(self, result) -> dict:
        """The worker is shutting down: the trainer stopped at a checkpoint; put the same attempt back
        in the queue (a new message; the one running now is acked when this returns)."""
        self.release(interrupted_at_step=result.steps)
        return self.summary(requeued=f"interrupted at step {result.steps}")

    def release(self, **tags) -> None:
        """Put the same attempt back in the queue, to resume from its last checkpoint (if this
        attempt still holds it), its run tagged ``queued`` with ``tags``."""
        if self.ledger.release(self.trial_id, self.number, owner=self.owner, now_s=time.time()):
            self.tracker.set_trial_status(self.run_id, "queued", attempt=self.number, **tags)
            self._send_again(self.number)

    def lose(self, exc: BaseException) -> dict:
        """A rank of a multi-device trial died (``RankFailed``): the attempt ends as a lost one, as if
        its worker had died. Below the attempt cap the trial goes back to the queue as the next
        attempt (it resumes from its checkpoint); at the cap it ends ``failed``."""
        message = f"{type(exc).__name__}: {exc}"
        self.tracker.log_text(self.run_id, message, f"errors/attempt-{self.number}.txt")
        lease = self.ledger.lease(self.trial_id)
        if (lease.charged_if_lost() if lease is not None else self.number) >= self.settings.max_attempts:
            self.fail(message[:500])
            return self.summary(outcome="failed", lost=message)
        if self.ledger.requeue(self.trial_id, self.number, now_s=time.time(), stale_before_s=0.0,
                               dead_owner=self.owner):
            self.tracker.set_trial_status(self.run_id, "queued", attempt=self.number + 1)
            self._send_again(self.number + 1)
        return self.summary(lost=message)

    def _send_again(self, number: int) -> None:
        """A new message for attempt ``number``, due in a few seconds: the worker shutting down may
        still fetch it, but then holds it unstarted and hands it back to the broker as it exits."""
        self._send(number, countdown_s=max(10.0, 2 * self.settings.heartbeat_s))

    def _send(self, number: int, *, countdown_s: float) -> None:
        from workers.studies.runner import Runner

        queue = (self.mlflow_run.data.tags.get("queue") if self.mlflow_run is not None else None) or "cpu"
        Runner(self.settings).send(self.study, self.trial_id, number, queue, countdown_s=countdown_s)

    def _keep_for_the_pages(self) -> None:
        """Keep the ended trial in the pages' read model (:mod:`workers.studies.read_model`). The trial
        is done whatever happens here: an outage leaves the row to the next read of the study."""
        from workers.studies.read_model import keep_ended

        try:
            keep_ended(self.ledger, self.tracker, self.trial_id)
        except Exception as exc:
            if not is_transient(exc):
                raise
            _log.warning(f"cbs trial {self.trial_id}: the pages' read model is left to the next read ({exc})")

    def _late_config_key(self) -> dict[str, str]:
        """``{"config_key": ...}`` for a run created before its study's token store was pinned (the
        study's first trials, which prepare the store, get no key at their start: the runner cannot
        read a store that does not exist yet), from the pin this trial trained on, so that a later
        study can reuse it too (:mod:`workers.studies.reuse`); ``{}`` where the run has its key or
        nothing is pinned."""
        if self.mlflow_run.data.tags.get("config_key"):
            return {}
        pin = self.ledger.store_pin(self.study)
        if pin is None:
            return {}
        from workers.studies.records import trial_spec
        from workers.studies.reuse import config_key

        return {"config_key": config_key(trial_spec(self.mlflow_run).train_config, pin.digest)}


def _give_backs(trial_id: str) -> int:
    """Give-backs counted so far in the trial's checkpoint folder (removed when the trial ends)."""
    from pathlib import Path

    try:
        return int((Path(checkpoint_dir(trial_id)) / "give-backs").read_text())
    except (OSError, ValueError):
        return 0


def _count_give_back(trial_id: str, given: int) -> None:
    """Record ``given`` give-backs (after ``release``); on a full disk the count is not kept and
    the backoff starts again at its first wait."""
    from pathlib import Path

    folder = Path(checkpoint_dir(trial_id))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "give-backs").write_text(str(given))
    except OSError as exc:
        _log.warning(f"cbs trial {trial_id}: could not count the give-back: {exc}")


def end_after_time_limit(study: str, trial_id: str, worker: str, limit_s: float | None,
                         settings: WorkerSettings | None = None) -> bool:
    """The hard time limit killed this worker's child running ``trial_id`` (called in the
    worker's parent, just before the kill): end the trial ``failed`` with that reason, so the
    runner does not take it for a lost worker and run it again up to the attempt cap."""
    s = settings or WorkerSettings.from_env()
    ledger = Ledger(s.ledger_url)
    lease = ledger.lease(trial_id)
    if lease is None or lease.state != "running" or (worker and lease.worker != worker):
        return False
    if limit_s and s.time_limit_s is None:  # derived from the trial's budget (workers.infra.time_limits)
        reason = (f"exceeded the hard time limit of {limit_s:g} s derived from its budget (set "
                  "CBS_TRIAL_TIME_LIMIT_S on the workers to raise it)")
    else:
        reason = f"exceeded the hard time limit of {limit_s:g} s (CBS_TRIAL_TIME_LIMIT_S)" if limit_s else \
            "exceeded the hard time limit (CBS_TRIAL_TIME_LIMIT_S)"
    held = Attempt(settings=s, ledger=ledger, study=study, trial_id=trial_id, number=lease.attempt,
                   owner=lease.owner, run_id=lease.run_id, worker=worker)
    return held.fail(reason)


def _advance(study: str) -> None:
    from workers.studies.runner import Runner

    Runner().advance(study)


def tell(s: WorkerSettings, study: str, tags: dict, outcome: str, result) -> None:
    from workers.studies.search import tell_outcome

    tell_outcome(s, study, tags, outcome, result)

"""The runner's repairs: what a process that died between two stores left, found and finished on
the next pass. :class:`Repairs` is a part the :class:`~workers.studies.runner.Runner` has (built
from its settings, stores, owner and ``send``), one method per kind of loose end:

* A lease ended but its run was not: the run is ended as the lease says (:meth:`Repairs.runs`).
* A study no longer running still has open leases or runs: they end ``stopped`` (:meth:`Repairs.ended`).
* A lease left ``creating`` after its run existed: the start is finished (:meth:`Repairs.creating`).
* A queued lease whose message is gone: its task is sent again (:meth:`Repairs.resend`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from cbscore.study import TERMINAL
from workers.infra.broker_queues import queue_depth
from workers.infra.checkpoints import remove_checkpoint, sweep
from workers.infra.settings import WorkerSettings
from workers.infra.time_limits import trial_time_limit_s
from workers.studies.ledger import Ledger, owner_is_dead
from workers.studies.search import tell_outcome
from workers.tracking import Tracker, result_tags

_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Repairs:
    """The repairs of one runner's passes."""

    settings: WorkerSettings
    """The runner's settings (``stale_after_s``: when a lease counts as left)."""
    tracker: Tracker
    """The MLflow store, where runs are ended."""
    ledger: Ledger
    """The lease ledger, which says how each trial ended."""
    owner: str
    """This process (:func:`workers.studies.ledger.this_process`): the owner of leases taken over."""
    send: Callable[..., None]
    """``send(study, trial_id, attempt, queue, time_limit_s=None)``: the runner's way to send a trial's task."""

    def runs(self, study: str, leases: dict, runs_by_trial: dict) -> list[str]:
        """A lease ended but its run was not (the process died in between): end the run as the
        lease says, with the full tag set of the result its checkpoint holds (``target_tau``,
        ``beta2``, ``ewa_taus``: the steps table reads them), and tell Optuna. Checkpoints of
        ended trials still on disk are removed afterwards (:mod:`workers.infra.checkpoints`)."""
        repaired = []
        for tid, lease in leases.items():
            run = runs_by_trial.get(tid)
            if (lease.state == "done" and run is not None and run.data.tags.get("status") not in TERMINAL
                    and run.info.status not in ("FINISHED", "FAILED", "KILLED")):
                outcome, result = lease.outcome or "failed", self._checkpoint_result(tid)
                self.tracker.end_trial(run.info.run_id, outcome, **({} if result is None else result_tags(result)))
                tell_outcome(self.settings, study, run.data.tags, outcome, result)
                repaired.append(tid)
        sweep(tid for tid, lease in leases.items() if lease.state == "done")
        return repaired

    def ended(self, study: str) -> list[str]:
        """Loose ends of a study that is no longer running (cancelled, done): a trial whose holder
        was lost after the cancel ends ``stopped``, a queued one too, and a run left open by a
        crash between the ledger and MLflow is ended. Returns the trials repaired.

        Cheap when there is nothing to do: MLflow is read only when a lease is still open or one
        ended since the last clean repair (the parent's ``repaired_s`` tag).
        """
        parent = self.tracker.study_run(study)
        if parent is None or parent.data.tags.get("status") == "running":
            return []
        leases = self.ledger.leases(study)
        since = float(parent.data.tags.get("repaired_s") or 0.0)
        if all(lease.state == "done" and lease.updated_s < since for lease in leases.values()):
            return []
        now = time.time()
        stale_before = now - self.settings.stale_after_s
        repaired = []
        for tid, lease in leases.items():
            if lease.state in ("queued", "creating"):
                if self.ledger.end_queued(tid, outcome="stopped", now_s=now) and lease.run_id:
                    self.tracker.end_trial(lease.run_id, "stopped", stop_reason="cancelled")
                    self._tell_stopped(study, lease.run_id)
                    repaired.append(tid)
            elif lease.state == "running":
                dead = lease.owner if owner_is_dead(lease.owner) else None
                if self.ledger.fail_lost(tid, lease.attempt, now_s=now, stale_before_s=stale_before, dead_owner=dead,
                                           outcome="stopped") and lease.run_id:
                    self.tracker.end_trial(lease.run_id, "stopped",
                                             stop_reason=f"lost its worker after the study was {parent.data.tags.get('status')}")
                    self._tell_stopped(study, lease.run_id)
                    remove_checkpoint(tid)
                    repaired.append(tid)
        exp_id, parent_id = parent.info.experiment_id, parent.info.run_id
        runs_by_trial = {r.data.tags.get("trial_id"): r for r in self.tracker.trial_runs(exp_id, parent_id)}
        repaired += self.runs(study, self.ledger.leases(study), runs_by_trial)
        if all(lease.state == "done" for lease in self.ledger.leases(study).values()):
            self.tracker.set_tags(parent_id, {"repaired_s": f"{now:.3f}"})
        return repaired

    def creating(self, study: str, now: float, runs_by_trial: dict) -> list[str]:
        """Finish the start of trials whose lease a process left ``creating`` after their run
        existed (it died, or raised, before ``mark_queued``): the planner sees the run and never
        starts such a trial again, so without this it waited forever. Once the lease is stale it is
        taken over, queued and its task sent."""
        out = []
        for tid, lease in self.ledger.leases(study).items():
            run = runs_by_trial.get(tid)
            if lease.state != "creating" or run is None or lease.updated_s >= now - self.settings.stale_after_s:
                continue  # (no run yet: the planner starts the trial again, and create() takes the lease over)
            queue = lease.queue or "cpu"
            if not (self.ledger.create(tid, study, queue, owner=self.owner, now_s=now,
                                         stale_after_s=self.settings.stale_after_s)
                    and self.ledger.mark_queued(tid, run_id=run.info.run_id, owner=self.owner, now_s=now)):
                continue
            from workers.studies.records import trial_spec

            self.send(study, tid, 1, queue, time_limit_s=trial_time_limit_s(self.settings,
                                                                              trial_spec(run).train_config, queue))
            out.append(tid)
        return out

    def resend(self, study: str, now: float) -> list[str]:
        """Send again the tasks of queued leases whose message is gone (module docstring)."""
        old = [lease for lease in self.ledger.leases(study).values()
               if lease.state == "queued" and (lease.sent_s or 0) < now - self.settings.stale_after_s]
        if not old:
            return []
        out = []
        for queue in {lease.queue or "cpu" for lease in old}:
            if queue_depth(queue) > 0:
                continue
            for lease in old:
                if (lease.queue or "cpu") == queue and self.ledger.mark_sent(lease.trial_id, lease.attempt, now):
                    self.send(study, lease.trial_id, lease.attempt, queue)
                    out.append(lease.trial_id)
        return out

    @staticmethod
    def _checkpoint_result(trial_id: str):
        """The :class:`TrialResult` the trial's checkpoint holds (``None``: no checkpoint here, or one
        of a trial that had not ended)."""
        from cbscore.train.checkpoint import load_checkpoint
        from cbscore.train.result import TrialResult
        from workers.infra.checkpoints import checkpoint_dir

        try:
            ckpt = load_checkpoint(checkpoint_dir(trial_id))
        except Exception as exc:  # noqa: BLE001 - an unreadable checkpoint: end the run with the outcome alone
            _log.warning(f"cbs study watch: the checkpoint of {trial_id} cannot be read: {exc}")
            return None
        return None if ckpt is None or ckpt.get("result") is None else TrialResult.from_dict(ckpt["result"])

    def _tell_stopped(self, study: str, run_id: str) -> None:
        """Tell Optuna of a stop decided here (a cancel, a loss after the study ended)."""
        tell_outcome(self.settings, study, self.tracker.get_run(run_id).data.tags, "stopped", None)

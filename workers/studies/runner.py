"""The study runner: launch a study, then keep it moving (``advance``), or cancel it.

``advance(study)`` is idempotent and safe to call from anywhere at any time: at launch, at the
end of every trial (the task calls it), and on a timer (``cbs study watch``). One pass reads the
study from MLflow and the ledger, asks the pure planner (:func:`cbscore.study.plan`) what to do,
and does it:

* ``lost`` (heartbeat stale, or holder dead on this host): the lease goes back to ``queued`` as
  attempt + 1 (compare-and-set, so two runners never both do it), the run's tags follow and a
  task ``{trial_id}-a{attempt}`` is sent; the trial resumes from its checkpoint. The filesystem
  transport loses a task whose whole worker was killed, so recovery never relies on the broker.
* ``fail`` (lost at the attempt cap): the trial ends ``failed``, its run FAILED.
* ``stop`` (pruning): a stop reason on the lease, which the trial's heartbeat reads; the trainer
  ends ``stopped`` and the trial is recorded ``pruned``.
* ``start`` / ``ask``: a lease (created by exactly one caller), a child run, then the task.
* tasks whose message went missing (a queued lease older than the staleness limit while its
  queue is empty) are sent again; duplicates are harmless (only one can claim the attempt).

A per-study lock in the ledger keeps passes from overlapping; a caller that finds it taken marks
the study dirty and the holder runs one more pass.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field

from cbscore.errors import CbsError, ConfigError
from cbscore.study import StudySpec, TrialSpec, plan, status_counts, trial_from_ask
from cbscore.train.branch_config import flat_dict
from workers.infra.checkpoints import remove_checkpoint
from workers.infra.settings import QUEUES, WorkerSettings
from workers.infra.time_limits import trial_time_limit_s
from workers.studies.kinds import worker_kind
from workers.studies.launch_checks import check_spec
from workers.studies.ledger import Ledger, owner_is_alive_here, owner_is_dead, this_process
from workers.studies.records import build_records, in_spec
from workers.studies.repair import Repairs
from workers.studies.retry import check_retry, retried_spec, retry_choices
from workers.studies.search import tell_outcome as tell
from workers.studies.study_lock import LockKeeper
from workers.tracking import Tracker, is_transient, outage_wait_s, trial_params

_log = logging.getLogger(__name__)

#: How long a study lock holds unrenewed. A pass renews it every third of this (``LockKeeper``), so
#: only a runner killed mid-pass lets it lapse, and that shuts the study's other runners out for at
#: most this long (300 s delayed a lost host's takeover by up to 5 min; the ledger's compare-and-set
#: transitions, not this lock, keep two runners from sending one trial twice).
_LOCK_TTL_S = 30.0
#: A holder alive on this host whose heartbeat is stale is slow (a loaded machine, a long MLflow
#: call), not lost: it is judged lost only after this many staleness limits (then it is hung).
_LOCAL_HUNG_FACTOR = 10
_MAX_PASSES = 3
#: The longest wait between two passes of ``watch`` while a store or the broker is unreachable.
_OUTAGE_MAX_WAIT_S = 30.0


@dataclass(frozen=True, kw_only=True)
class AdvanceReport:
    """What one ``advance`` did (for logs and tests)."""

    study: str
    started: tuple[str, ...] = ()
    requeued: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    stopped: tuple[str, ...] = ()
    resent: tuple[str, ...] = ()
    repaired: tuple[str, ...] = ()
    done: bool = False
    skipped: str | None = None
    errors: tuple[str, ...] = field(default_factory=tuple)
    outage: bool = False
    """The pass failed because a store or the broker was unreachable (the runner backs off)."""


def failed_references(spec: StudySpec, records, targets, study: str) -> list[str]:
    """One message per setting that has no target because a trial of its reference cell failed
    (a fault, not a measurement: run again, it may give the target), naming the trials."""
    out = []
    for setting in spec.resolve_settings():
        sid = setting.setting_id
        failed = sorted(r.trial_id for r in records
                        if r.setting_id == sid and r.batch_size == spec.b_ref and r.status == "failed")
        if sid not in targets and failed:
            out.append(f"setting {sid!r} has no target: its reference trial(s) {', '.join(failed)} failed; the study "
                       f"waits instead of ending done (`cbs study retry {study}` runs them again)")
    return out


class Runner:
    """Launch, advance and cancel studies against one set of settings."""

    #: How long a study lock holds without renewal (renewed every third of it while a pass runs).
    lock_ttl_s = _LOCK_TTL_S

    def __init__(self, settings: WorkerSettings | None = None):
        self.settings = settings or WorkerSettings.from_env()
        self.tracker = Tracker(self.settings.tracking_uri, self.settings.artifact_root)
        self.ledger = Ledger(self.settings.ledger_url)
        self.owner = this_process()

    @property
    def repairs(self) -> Repairs:
        """The repairs of this runner's passes, over its current settings, stores and owner."""
        return Repairs(settings=self.settings, tracker=self.tracker, ledger=self.ledger, owner=self.owner,
                       send=self.send)

    # ------------------------------------------------------------------ launch
    def launch(self, spec: StudySpec, *, force: bool = False, owner: str = "") -> str:
        """Validate, create the experiment and parent run, enqueue the first trials; returns the name.

        ``owner`` (the signed-in user, or who ran the CLI) is recorded in the parent run's ``owner``
        tag. Launching a study that exists with the same spec resumes it (idempotent); with a
        different spec it is refused.
        """
        check_spec(spec, force=force)
        exp = self.tracker.experiment(spec.name)
        if exp is not None:
            parent = self.tracker.study_run(spec.name)
            stored = self.tracker.study_spec(parent) if parent is not None else None
            if stored is None or StudySpec.from_dict(stored).to_dict() != spec.to_dict():
                raise ConfigError("name", spec.name, "a study with this name exists with a different spec; "
                                  "pick another name")
            if parent.data.tags.get("status") == "cancelled":
                raise ConfigError("name", spec.name, "names a cancelled study; pick another name")
        else:
            self._check_broker()
            params = {k: v for k, v in spec.to_dict().items() if not isinstance(v, (dict, list)) and v is not None}
            params.update({"search.kind": spec.search.kind, "n_settings": len(spec.resolve_settings()),
                           "batch_sizes": json.dumps(list(spec.batch_sizes))})
            self.tracker.create_study(spec.name, spec_dict=spec.to_dict(), spec_yaml=spec.to_yaml(), params=params,
                                      tags={"kind": spec.kind, "b_ref": str(spec.b_ref),
                                            "overhead": str(spec.overhead), "owner": owner})
        self.advance(spec.name)
        return spec.name

    def _check_broker(self) -> None:
        from cbscore.errors import masked_url
        from workers.infra.broker import app

        try:
            with app.connection_for_write() as conn:
                # one retry, 0.2 s later (kombu's default waits 2 s first): a broker that is down
                # answers a refused connection at once, and the page says so within a second
                conn.ensure_connection(max_retries=1, interval_start=0.2, timeout=5)
        except Exception as exc:
            raise CbsError(f"the broker {masked_url(self.settings.broker_url)!r} does not answer ({exc}); nothing was "
                           "launched") from None

    # ------------------------------------------------------------------ advance
    def advance(self, study: str) -> AdvanceReport:
        """One (or a few) idempotent passes over ``study``; see the module docstring."""
        now = time.time()
        ttl = self.lock_ttl_s
        if not self.ledger.try_lock(study, self.owner, now_s=now, ttl_s=ttl):
            return AdvanceReport(study=study, skipped="another runner is advancing this study")
        report = AdvanceReport(study=study)
        try:
            with LockKeeper(self.ledger, study, self.owner, ttl):
                for _ in range(_MAX_PASSES):
                    report = self._advance_once(study)
                    if self.ledger.unlock(study, self.owner):
                        break
                    self.ledger.try_lock(study, self.owner, now_s=time.time(), ttl_s=ttl)
                else:
                    self.ledger.unlock(study, self.owner)
        except BaseException:
            self._release_lock(study)
            raise
        return report

    def _release_lock(self, study: str) -> None:
        """Let go of ``study``'s lock after a failed pass, even when another caller asked for one more
        pass meanwhile (``unlock`` keeps a dirty lock for its holder): that caller's next pass is the
        retry. Kept, the lock would shut every runner out until its TTL (5 min) although its holder
        (often a trial's process, about to exit) never runs that pass."""
        try:
            self.ledger.try_lock(study, self.owner, now_s=time.time(), ttl_s=self.lock_ttl_s)  # clears dirty
            self.ledger.unlock(study, self.owner)
        except Exception as exc:  # noqa: BLE001 - the ledger is away too: the lock lapses at its TTL
            _log.warning(f"cbs runner: releasing the lock of {study} failed ({type(exc).__name__}: {exc})")

    def advance_all(self, log=print) -> list[AdvanceReport]:
        """Advance every study that is still running, and repair the others' loose ends.

        One study's failure is logged and the next study goes on (a bad spec, a run MLflow
        refuses): a runner serving many studies never stops for one.
        """
        out = []
        for exp, parent in self.tracker.studies():
            if parent is None:
                continue
            try:
                if parent.data.tags.get("status") == "running":
                    out.append(self.advance(exp.name))
                else:
                    repaired = self.repair_ended(exp.name)
                    if repaired:
                        out.append(AdvanceReport(study=exp.name, repaired=tuple(repaired),
                                                 skipped=f"study is {parent.data.tags.get('status')}"))
            except Exception as exc:  # noqa: BLE001 - see the docstring
                log(f"cbs study watch: {exp.name}: this pass failed ({type(exc).__name__}: {exc}); "
                    "the other studies go on")
                out.append(AdvanceReport(study=exp.name, skipped="failed", errors=(f"{type(exc).__name__}: {exc}",),
                                         outage=is_transient(exc)))
        return out

    def request_stops(self, stops, stopped_by, run_ids) -> list[str]:
        """Ask each ``(trial id, reason)`` of a plan's stops through its lease (the holder stops at its
        next heartbeat) and tag its run ``stop_requested`` and ``stopped_by`` (the rule that asked,
        ``cbscore.study.plan_result.STOP_RULES``); the trial ids whose stop was taken."""
        stopped = []
        for tid, reason in stops:
            if self.ledger.request_stop(tid, reason):
                tags = {"stop_requested": reason}
                if tid in stopped_by:
                    tags["stopped_by"] = stopped_by[tid]
                self.tracker.set_tags(run_ids[tid], tags)
                stopped.append(tid)
        return stopped

    def _advance_once(self, study: str) -> AdvanceReport:
        s = self.settings
        parent = self.tracker.study_run(study)
        if parent is None:
            return AdvanceReport(study=study, skipped="no such study")
        status = parent.data.tags.get("status")
        if status != "running":
            return AdvanceReport(study=study, skipped=f"study is {status}")
        spec = StudySpec.from_dict(self.tracker.study_spec(parent))
        exp_id, parent_id = parent.info.experiment_id, parent.info.run_id
        runs = self.tracker.trial_runs(exp_id, parent_id)
        leases = self.ledger.leases(study)
        records = in_spec(spec, build_records(runs, leases, self.tracker))  # cells an extension dropped: hidden
        by_id = {r.trial_id: r for r in records}
        runs_by_trial = {r.data.tags.get("trial_id"): r for r in runs}
        now = time.time()

        repaired = self.repairs.runs(study, leases, runs_by_trial)

        snapshots = worker_kind(spec).study_snapshots(spec, records)  # the pure planner reads no disk
        p = plan(spec, records, now, snapshots=snapshots, stale_after_s=s.stale_after_s, max_attempts=s.max_attempts)

        stale_before = now - s.stale_after_s
        failed = []
        for tid in p.fail:
            rec, lease = by_id[tid], leases.get(tid)
            if (lease is None or lease.state != "running" or self._slow_not_lost(lease, now)
                    or self._may_give_back(lease, now)):
                continue
            dead = lease.owner if owner_is_dead(lease.owner) else None
            if self.ledger.fail_lost(tid, lease.attempt, now_s=now, stale_before_s=stale_before, dead_owner=dead):
                self.tracker.end_trial(rec.run_id, "failed",
                                       stop_reason=lease.lost_reason(s.max_attempts))
                tell(s, study, runs_by_trial[tid].data.tags, "failed", None)
                remove_checkpoint(tid)
                failed.append(tid)

        requeued = []
        for tid in p.lost:
            rec, lease = by_id[tid], leases.get(tid)
            if lease is None or lease.state != "running" or self._slow_not_lost(lease, now):
                continue
            dead = lease.owner if owner_is_dead(lease.owner) else None
            if self.ledger.requeue(tid, lease.attempt, now_s=now, stale_before_s=stale_before, dead_owner=dead):
                attempt = lease.attempt + 1
                self.tracker.set_trial_status(rec.run_id, "queued", attempt=attempt,
                                              lost_attempt=f"{lease.attempt} ({lease.owner})")
                self.send(study, tid, attempt, lease.queue or self._queue())
                requeued.append(tid)

        stopped = self.request_stops(p.stop, p.stopped_by, {tid: by_id[tid].run_id for tid, _ in p.stop})

        started = []
        for ts in p.start:
            if self._start(ts, exp_id, parent_id):
                started.append(ts.trial_id)
        if p.ask:
            from workers.studies.search import CellSearch

            search = CellSearch(s.optuna_storage, study)
            for ask in p.ask:
                known = {r.search_number for r in records if r.cell_id == ask.cell_id and r.search_number is not None}
                n_startup = max(2, spec.search.n_trials // 2)
                for number, lr in search.ask(ask.cell_id, ask.count, lr_min=spec.search.lr_min,
                                             lr_max=spec.search.lr_max, n_startup=n_startup, known_numbers=known):
                    ts = trial_from_ask(spec, ask, lr=lr, number=number)
                    if self._start(ts, exp_id, parent_id):
                        started.append(ts.trial_id)

        resent = self.repairs.resend(study, now) + self.repairs.creating(study, now, runs_by_trial)

        tags = {f"target/{k}": repr(float(v)) for k, v in p.targets.items()}  # exact: it round-trips
        # A reference trial that failed for good leaves its setting without a target: the study
        # says so and waits (for `cbs study retry`) instead of ending done without it.
        errors = list(p.errors) + (failed_references(spec, records, p.targets, study) if p.done else [])
        tags["errors"] = json.dumps(errors)[:7900] if errors else ""
        tags["advanced_s"] = f"{now:.3f}"
        # The studies list reads these instead of every trial (as of this pass).
        counts = status_counts(records, p)
        moved = [(tid, "queued") for tid in requeued] + [(tid, "failed") for tid in failed]
        for tid, status in moved:
            counts[by_id[tid].status] -= 1
            counts[status] = counts.get(status, 0) + 1
        counts["queued"] = counts.get("queued", 0) + len(started)
        counts = {k: v for k, v in counts.items() if v}
        tags["counts"] = json.dumps(counts, sort_keys=True)
        tags["tokens_spent"] = str(sum(r.tokens for r in records))
        self.tracker.set_tags(parent_id, tags)
        done = p.done and len(errors) == len(p.errors)
        if done and not (started or requeued):
            self.tracker.set_study_status(parent_id, "done", end="FINISHED")
        return AdvanceReport(study=study, started=tuple(started), requeued=tuple(requeued), failed=tuple(failed),
                             stopped=tuple(stopped), resent=tuple(resent), repaired=tuple(repaired),
                             done=done, errors=tuple(errors))

    def _slow_not_lost(self, lease, now: float) -> bool:
        """A stale heartbeat from a holder that still runs on this host: it is slow, and taking the
        trial from it would run the trial twice at once (module docstring). Hung past
        ``_LOCAL_HUNG_FACTOR`` staleness limits, it is lost after all."""
        return (owner_is_alive_here(lease.owner)
                and (lease.heartbeat_s or 0.0) > now - _LOCAL_HUNG_FACTOR * self.settings.stale_after_s)

    def _may_give_back(self, lease, now: float) -> bool:
        """At the attempt cap, a holder on another host whose heartbeat stopped less than the
        longest a holder cut off from the ledger waits to give its attempt back (three quarters of
        the staleness limit, then ``CBS_OUTAGE_WAIT_S``) may be doing just that: failing it now
        would make an outage (after which this pass beat the holder to the ledger) cost the trial.
        Below the cap its requeue is undone by the give-back (``Ledger.give_back``); a holder known
        dead here is failed at once."""
        return (not owner_is_dead(lease.owner) and not owner_is_alive_here(lease.owner)
                and (lease.heartbeat_s or 0.0) > now - self.settings.stale_after_s - outage_wait_s())

    # ------------------------------------------------------------------ repair (workers.studies.repair)
    def repair_ended(self, study: str) -> list[str]:
        """Loose ends of a study that is no longer running (:meth:`workers.studies.repair.Repairs.ended`)."""
        return self.repairs.ended(study)

    def _tell(self, study: str, run_id: str, outcome: str) -> None:
        """Tell Optuna of an ending decided here (a cancel, a loss after the study ended)."""
        tell(self.settings, study, self.tracker.get_run(run_id).data.tags, outcome, None)

    # ------------------------------------------------------------------ trials
    def _start(self, ts: TrialSpec, exp_id: str, parent_id: str) -> bool:
        """Lease, run and task for a new trial; False if another caller made (or makes) it."""
        now = time.time()
        queue = self._queue()
        if not self.ledger.create(ts.trial_id, ts.study, queue, owner=self.owner, now_s=now,
                                  stale_after_s=self.settings.stale_after_s):
            return False
        existing = self.tracker.find_trial(exp_id, ts.trial_id)  # made before a crash?
        key = self._config_key(ts)
        if existing is not None:
            run_id = existing.info.run_id
        else:
            tc = ts.train_config
            tags = {
                "config_key": key or "",
                "study": ts.study, "setting": ts.setting_id, "cell": ts.cell_id, "model": ts.model,
                "batch_size": str(ts.batch_size), "lr": repr(ts.lr), "seed": str(ts.seed), "role": ts.role,
                "max_tokens": str(ts.max_tokens), "max_steps": "" if ts.max_steps is None else str(ts.max_steps),
                "target_loss": "" if ts.target_loss is None else repr(ts.target_loss),
                "search_number": "" if ts.search_number is None else str(ts.search_number),
                "n_params": str(ts.n_params), "setting_tokens": str(ts.setting_tokens),
                "branch_tokens": str(flat_dict(tc).get("branch_tokens") or ""),  # a local study's branch: where it starts
                "context_tokens": str(tc.get("context_tokens", "")),
                "queue": queue, "trial_spec": json.dumps(ts.to_dict(), sort_keys=True),
            }
            run_id = self.tracker.create_trial(exp_id, parent_id, trial_id=ts.trial_id, tags=tags,
                                               params=trial_params(ts.train_config))
        source = self._reusable(ts, key, exp_id)
        if source is not None:  # trained already, by this very config: copied, not trained (workers.studies.reuse)
            from workers.studies.reuse import copy_result

            outcome = copy_result(self.tracker, source, run_id)
            if self.ledger.mark_queued(ts.trial_id, run_id=run_id, owner=self.owner, now_s=time.time()):
                self.ledger.end_queued(ts.trial_id, outcome=outcome, now_s=time.time())
            return True
        if not self.ledger.mark_queued(ts.trial_id, run_id=run_id, owner=self.owner, now_s=time.time()):
            return False
        self.send(ts.study, ts.trial_id, 1, queue,
                  time_limit_s=trial_time_limit_s(self.settings, ts.train_config, queue))
        return True

    def _config_key(self, ts: TrialSpec) -> str | None:
        """The trial's reuse key (:func:`workers.studies.reuse.config_key`): its trainer config and the
        digest of its study's token store (pinned, or the store this host would use), ``None``
        while neither is known (the study's first trials on a host without the store)."""
        from workers.studies.reuse import config_key

        digests = self.__dict__.setdefault("_store_digests", {})  # a pinned digest never changes
        digest = digests.get(ts.study)
        if digest is None:
            pin = self.ledger.store_pin(ts.study)
            digest = digests[ts.study] = pin.digest if pin is not None else None
        if digest is None:  # not pinned yet: the store this host would use (read each time, until pinned)
            from cbscore.data import DataConfig
            from cbscore.data.store import content_digest, reuse_problem

            try:
                data = DataConfig.from_dict(dict(ts.train_config.get("data") or {}))
                digest = content_digest(data.store_path()) if reuse_problem(data) is None else None
            except Exception:  # noqa: BLE001 - no key: the trial is trained, never wrongly reused
                digest = None
        return None if digest is None else config_key(ts.train_config, digest)

    def _reusable(self, ts: TrialSpec, key: str | None, exp_id: str):
        """A finished run of any study with ``key`` to copy, unless the study opts out. (What the
        answer needs, the study's switch and every study's experiment, is read once per few
        seconds: a pass starts dozens of trials.)"""
        if key is None:
            return None
        now = time.monotonic()
        memo = self.__dict__.setdefault("_reuse_memo", {})
        if ts.study not in memo or now - memo[ts.study][0] > 5.0:
            parent = self.tracker.study_run(ts.study)
            spec = StudySpec.from_dict(self.tracker.study_spec(parent)) if parent is not None else None
            experiments = [e.experiment_id for e in self.tracker.experiments_tagged("cbs.study", "1")]
            memo[ts.study] = (now, spec is not None and spec.reuse_trials, experiments)
        _, enabled, experiments = memo[ts.study]
        if not enabled:
            return None
        from workers.studies.reuse import find_reusable

        return find_reusable(self.tracker, key, experiment_ids=experiments)

    def _queue(self) -> str:
        """``CBS_TRIAL_QUEUE`` if set, else ``gpu`` when a GPU worker is alive, else ``cpu``."""
        forced = os.environ.get("CBS_TRIAL_QUEUE")
        if forced:
            if forced not in QUEUES:
                raise ConfigError("CBS_TRIAL_QUEUE", forced, f"must be one of {', '.join(QUEUES)}")
            return forced
        live = self.ledger.workers(now_s=time.time(), stale_after_s=self.settings.stale_after_s)
        return "gpu" if any(w.queue == "gpu" for w in live) else "cpu"

    def send(self, study: str, trial_id: str, attempt: int, queue: str, *, countdown_s: float | None = None,
             time_limit_s: float | None = None) -> None:
        """Send the task ``{trial_id}-a{attempt}`` (a duplicate is harmless: one claim wins) with the
        trial's hard time limit (:mod:`workers.infra.time_limits`; read from its run when not given)."""
        from workers.infra.broker import TRIAL_TASK, app

        if time_limit_s is None:
            time_limit_s = self._time_limit(trial_id, queue)
        try:
            app.send_task(TRIAL_TASK, args=[study, trial_id, attempt], task_id=f"{trial_id}-a{attempt}", queue=queue,
                          routing_key=queue, countdown=countdown_s, time_limit=time_limit_s)
        except Exception as exc:
            if is_transient(exc):  # the broker is away: the first pass after it is back sends it again
                try:
                    self.ledger.mark_sent(trial_id, attempt, 0.0)
                except Exception:  # noqa: BLE001 - the ledger too: resent a staleness limit later instead
                    pass
            raise

    def _time_limit(self, trial_id: str, queue: str) -> float | None:
        """``CBS_TRIAL_TIME_LIMIT_S``, else the limit derived from the trial's budget (its run's
        ``trial_spec`` tag); ``None`` (the worker's setting) when the store cannot say."""
        if self.settings.time_limit_s is not None:
            return self.settings.time_limit_s
        lease = self.ledger.lease(trial_id)
        try:
            run = self.tracker.get_run(lease.run_id) if lease is not None and lease.run_id else None
        except Exception as exc:  # noqa: BLE001 - a store outage (a give-back) must not stop the send
            _log.warning(f"cbs runner: {trial_id}: no time limit derived (the run cannot be read: {exc})")
            return None
        config = json.loads(run.data.tags.get("trial_spec") or "{}").get("train_config") if run else None
        return trial_time_limit_s(self.settings, config, queue)

    # ------------------------------------------------------------------ cancel
    def cancel_trial(self, trial_id: str, *, reason: str = "cancelled") -> str:
        """Stop one trial: a queued one ends ``stopped`` at once, a running one at its next heartbeat."""
        lease = self.ledger.lease(trial_id)
        if lease is None:
            raise ConfigError("trial_id", trial_id, "names no trial of any study")
        now = time.time()
        if self.ledger.end_queued(trial_id, outcome="stopped", now_s=now):
            if lease.run_id:
                self.tracker.end_trial(lease.run_id, "stopped", stop_reason=reason)
                self._tell(lease.study, lease.run_id, "stopped")
            remove_checkpoint(trial_id)  # a trial released at a checkpoint, then cancelled
            return "stopped"
        if self.ledger.request_stop(trial_id, reason):
            if lease.run_id:
                self.tracker.set_tags(lease.run_id, {"stop_requested": reason})
            return "stopping"
        return (self.ledger.lease(trial_id).outcome or "done")

    # ------------------------------------------------------------------ extend
    def _open_study(self, study: str):
        """The parent run of ``study`` that may still grow: it exists and was not cancelled."""
        parent = self.tracker.study_run(study)
        if parent is None:
            raise ConfigError("name", study, "names no study")
        if parent.data.tags.get("status") == "cancelled":
            raise ConfigError("name", study, "names a cancelled study; launch a new one")
        return parent

    def extend(self, study: str, patch, *, author: str = "", force: bool = False) -> tuple[StudySpec, list[str]]:
        """Grow ``study`` by ``patch`` (:mod:`cbscore.study.extend`): store the new spec version,
        reopen a done study, and advance it, so only the new cells and trials run. Returns the
        new spec and the changes in words; bad input raises ``ConfigError`` with nothing changed."""
        from cbscore.study.extend import extend_spec
        from cbscore.study.targets import setting_targets

        parent = self._open_study(study)
        stored = StudySpec.from_dict(self.tracker.study_spec(parent))
        runs = self.tracker.trial_runs(parent.info.experiment_id, parent.info.run_id)
        records = build_records(runs, self.ledger.leases(study), self.tracker)
        targets, _ = setting_targets(stored, in_spec(stored, records))
        new, changes = extend_spec(stored, patch, targets=targets, ran_batch_sizes={r.batch_size for r in records},
                                   busy_batch_sizes={r.batch_size for r in records if not r.terminal})
        check_spec(new, force=force)
        self.tracker.update_study_spec(parent, spec_dict=new.to_dict(), spec_yaml=new.to_yaml(), author=author,
                                       changes=changes, now_s=time.time())
        if parent.data.tags.get("status") == "done":
            self.tracker.reopen_study(parent.info.run_id)
        self.advance(study)
        return new, changes

    # ------------------------------------------------------------------ retry
    def retry(self, study: str, *, failed: bool = True, censored: bool = False, budget_factor: float = 2.0,
              author: str = "") -> list[str]:
        """Run again, as new trials beside the old ones, every ``failed`` trial of ``study`` and every
        censored trial of a cell that nothing reached (:mod:`workers.studies.retry` chooses them). The
        reason and who asked are the new runs' ``retry_of``/``retry_reason``/``retried_by`` tags. A
        done study runs again. Returns the new trial ids."""
        from workers.studies.records import trial_spec

        check_retry(failed=failed, censored=censored, budget_factor=budget_factor)
        parent = self._open_study(study)
        spec = StudySpec.from_dict(self.tracker.study_spec(parent))
        exp_id, parent_id = parent.info.experiment_id, parent.info.run_id
        runs = self.tracker.trial_runs(exp_id, parent_id)
        by_run = {r.info.run_id: r for r in runs}
        records = in_spec(spec, build_records(runs, self.ledger.leases(study), self.tracker))
        started, now = [], time.time()
        for r, factor, why in retry_choices(records, failed=failed, censored=censored, budget_factor=budget_factor):
            ts = retried_spec(trial_spec(by_run[r.run_id]), factor)
            if self._start(ts, exp_id, parent_id):
                run = self.tracker.find_trial(exp_id, ts.trial_id)
                if run is not None:
                    self.tracker.set_tags(run.info.run_id, {"retry_of": r.trial_id, "retry_reason": why[:250],
                                                            "retried_by": author, "retried_s": f"{now:.3f}"})
                started.append(ts.trial_id)
        if started and parent.data.tags.get("status") == "done":
            self.tracker.reopen_study(parent_id)
        self.advance(study)
        return started

    def cancel_study(self, study: str) -> int:
        """Cancel every unfinished trial and end the study KILLED; returns the trials stopped."""
        parent = self.tracker.study_run(study)
        if parent is None:
            raise ConfigError("name", study, "names no study")
        self.tracker.set_study_status(parent.info.run_id, "cancelled")
        n = 0
        for tid, lease in self.ledger.leases(study).items():
            if lease.state != "done":
                self.cancel_trial(tid, reason="cancelled")
                n += 1
        self.tracker.set_study_status(parent.info.run_id, "cancelled", end="KILLED")
        return n

    # ------------------------------------------------------------------ watch
    def watch(self, *, period_s: float | None = None, passes: int | None = None, log=print) -> None:
        """Advance every running study every ``period_s`` (``CBS_WATCH_PERIOD_S``), forever.

        A pass that meets an unreachable store or broker (a send that fails, a database that
        restarts) is tried again after doubling waits, up to 8 periods or 30 s, and at the period
        again once a pass gets through: the pass is idempotent, and a task whose send failed goes
        out with the first pass after the outage."""
        period = period_s or self.settings.watch_period_s
        longest = max(period, min(_OUTAGE_MAX_WAIT_S, 8 * period))
        wait = period
        n = 0
        while passes is None or n < passes:
            t0 = time.time()
            outage, failed = False, ""
            try:
                for rep in self.advance_all(log=log):
                    outage = outage or rep.outage
                    if rep.started or rep.requeued or rep.failed or rep.resent or rep.repaired or rep.stopped:
                        log(f"cbs study watch: {rep.study}: started {len(rep.started)}, requeued {list(rep.requeued)}, "
                            f"failed {list(rep.failed)}, pruned {list(rep.stopped)}, resent {list(rep.resent)}")
            except CbsError as exc:
                log(f"cbs study watch: {exc}")
            except Exception as exc:  # noqa: BLE001 - one bad pass (a broker folder briefly unusable, a
                # database hiccup) must not end the runner: under `cbs up` that would stop every process,
                # running trials included. The next pass retries; the pass is idempotent.
                outage, failed = is_transient(exc), f"this pass failed ({type(exc).__name__}: {exc}); "
            wait = min(longest, 2 * wait) if outage else period
            if failed or outage:
                log(f"cbs study watch: {failed}" + ("a store or the broker is unreachable: " if outage else "")
                    + f"retrying in {wait:g} s")
            n += 1
            if passes is None or n < passes:
                time.sleep(max(0.0, wait - (time.time() - t0)))

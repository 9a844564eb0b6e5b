"""Trial records rebuilt from MLflow (the record) and the ledger (who holds what right now).

A :class:`cbscore.study.TrialRecord` per child run: identity and hyper-parameters from tags,
latest figures from the run's latest metric values (they come with ``search_runs``), and the
held-out curve ``eval/loss_ewa`` only where the planner needs it (reference trials, whose
crossing of the target gives ``S(B_ref)``, running trials, which it may prune, and reached trials,
which it compares them with at equal tokens); histories of
ended runs are cached by the tracker.

Status: MLflow's ``status`` tag, corrected by the ledger, which changes first: a lease that is
``queued``/``running`` wins over a stale tag, a ``done`` lease whose run was not ended (the
process died in between) reports the lease's outcome, and a running lease whose holder is a dead
process on this host is ``lost`` at once (no need to wait for the heartbeat to go stale).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cbscore.study import TERMINAL, TrialRecord, TrialSpec
from workers.infra.parse import as_float, as_int
from workers.studies.ledger import Lease, owner_is_dead
from workers.tracking import Tracker


def trial_status(tags: Mapping[str, str], lease: Lease | None) -> str:
    """The trial's status from its run's tags and its lease (module docstring).

    An ended run whose lease is not done yet (the trial ends its run first, then the ledger: an
    outage or a kill in between sends the attempt back) is not ended for the planner: it is
    queued, running or lost as its lease says until the ledger agrees. Otherwise an Optuna cell
    that runs its trials in turn asks for the next one while this one is being requeued, before
    Optuna has been told of it (the chaos run's "fourth trial").
    """
    status = tags.get("status", "queued")
    if lease is None:
        return status
    if lease.state == "done":
        return status if status in TERMINAL else (lease.outcome or "failed")
    if lease.state == "running":
        return "lost" if owner_is_dead(lease.owner) else "running"
    return "queued"  # creating / queued


def trial_spec(run) -> TrialSpec:
    """The TrialSpec stored with a trial run (tag ``trial_spec``)."""
    return TrialSpec.from_dict(json.loads(run.data.tags["trial_spec"]))


def record_from_run(run, lease: Lease | None, tracker: Tracker, *, with_history: bool | None = None) -> TrialRecord:
    """One TrialRecord; ``with_history=None`` fetches the eval curve where the planner needs it."""
    tags, metrics = run.data.tags, run.data.metrics
    status = trial_status(tags, lease)
    attempt = max(as_int(tags.get("attempt"), 1), lease.attempt if lease is not None else 1)
    beats = [x for x in (metrics.get("heartbeat"), lease.heartbeat_s if lease is not None else None) if x is not None]
    if with_history is None:
        # A reached trial's curve too: running trials are compared with it at equal tokens
        # (cbscore.study.equal_tokens); an ended run's history is read once (the tracker caches it).
        with_history = tags.get("role") == "reference" or status in ("running", "reached")
    eval_steps: tuple[float, ...] = ()
    eval_losses: tuple[float, ...] = ()
    if with_history:
        eval_steps, eval_losses = tracker.history(run, "eval/loss_ewa")
    final = as_float(metrics.get("summary/final_eval_loss"))
    if final is None:
        final = as_float(metrics.get("eval/loss_ewa"))
    batch_size = as_int(tags.get("batch_size"), 0)
    # progress/tokens is the stream position; a branch of a local study starts at its base's
    # checkpoint (tag branch_tokens), so what it trained is the difference
    tokens = max(0, as_int(metrics.get("progress/tokens"), 0) - as_int(tags.get("branch_tokens"), 0))
    context = as_int(tags.get("context_tokens"), 0)
    last_step = as_int(metrics.get("progress/step"), None)
    if last_step is None:
        last_step = tokens // (batch_size * context) if batch_size and context else 0
    return TrialRecord(
        trial_id=tags["trial_id"],
        cell_id=tags.get("cell", ""),
        setting_id=tags.get("setting", ""),
        role=tags.get("role", "trial"),
        batch_size=batch_size,
        lr=as_float(tags.get("lr")) or 0.0,
        status=status,
        attempt=attempt,
        charged_attempts=lease.charged_if_lost() if lease is not None else None,
        steps_to_target=as_float(metrics.get("summary/steps_to_target")) if status == "reached" else None,
        final_eval_loss=final,
        final_raw_loss=as_float(metrics.get("summary/final_raw_loss")),
        last_step=last_step,
        tokens=tokens,
        heartbeat_s=max(beats) if beats else None,
        run_id=run.info.run_id,
        eval_steps=eval_steps,
        eval_losses=eval_losses,
        max_steps=as_int(tags.get("max_steps"), None),
        seed=as_int(tags.get("seed"), 0),
        search_number=as_int(tags.get("search_number"), None),
        note=tags.get("stop_reason", "") if status in TERMINAL else
        (tags.get("given_back", "") if status == "queued" else ""),
        reused_from=f"{tags['reused_from_study']}/{tags['reused_from']}" if tags.get("reused_from") else "",
        stopped_by=tags.get("stopped_by", "") if status == "pruned" else "",
    )


def build_records(runs, leases: Mapping[str, Lease], tracker: Tracker, *,
                  with_history: bool | None = None) -> list[TrialRecord]:
    """Records of a study's trial runs, in trial-id order (one per trial: the newest run wins)."""
    by_trial: dict[str, Any] = {}
    for run in runs:
        tid = run.data.tags.get("trial_id")
        if tid is None:
            continue
        if tid not in by_trial or run.info.start_time > by_trial[tid].info.start_time:
            by_trial[tid] = run
    return [record_from_run(by_trial[t], leases.get(t), tracker, with_history=with_history) for t in sorted(by_trial)]


def in_spec(spec, records):
    """The records of cells the spec has: a batch size (or setting) an extension dropped after it
    ran is hidden from the planner, the table and the fit; its runs stay in MLflow
    (:mod:`cbscore.study.extend`)."""
    settings = {x.setting_id for x in spec.resolve_settings()}
    sizes = set(spec.batch_sizes)
    return [r for r in records if r.batch_size in sizes and r.setting_id in settings]

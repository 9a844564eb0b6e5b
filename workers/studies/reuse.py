"""Trials reused across studies: a trial whose whole configuration a finished trial of
any study already trained is not trained again; its run is copied into the new study.

Why it is exact: a trial is a pure function of its trainer config and its data. The trainer's
config (model, batch size, learning rate, β2 and the τ, schedule, warm-up, budget, step cap,
target, seed, evaluation settings: :func:`cbscore.study.build_train_config`) and the content
digest of the token store it reads (:func:`cbscore.data.store.content_digest`, pinned per study by
:mod:`workers.studies.stores`) make the **config key**; the lab's trainer is deterministic on a device kind
and thread count (a resumed trial ends bit-identical: ``tests/workers/test_worker_process.py``), so two
trials with one key train the same steps to the same losses. The thread count is not in the key: on a
CPU it changes the last digits of the floats (tiny-0.1M, B = 8, 40k tokens: a final loss of
6.106189727783203 at one thread and 6.106190204620361 at two, each twice), which can grow along a
run; a copy is what its source trained, and the run's ``device`` tag says with how many threads
(``cpu (2 threads)``). A budget or a cap that differs is another key:
a longer budget could have crossed a target the shorter one did not.

Reusable outcomes are those the trial decides alone: ``finished``, ``reached``, ``censored`` and
``diverged``. ``pruned`` and ``stopped`` were decided by the planner of another study (its best
trial, its cancel), so those trials run again. The copy is a new run in the new study with every
metric history and the result's tags of the source, tagged ``reused_from`` (run id) and
``reused_from_study``; the lease goes straight to ``done``. A study opts out with
``reuse_trials: false``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from cbscore.train.branch_config import flat_dict

#: Outcomes a trial reaches by itself (module docstring); only these are reused.
REUSABLE = ("finished", "reached", "censored", "diverged")

#: Tags that say which study, cell and attempt a run is: the copy keeps its own.
_OWN_TAGS = frozenset({"trial_id", "study", "setting", "cell", "role", "queue", "trial_spec", "attempt", "worker",
                       "pid", "given_back", "search_number", "config_key", "max_steps", "max_tokens",
                       "target_loss", "lr", "seed", "batch_size", "model", "n_params", "setting_tokens",
                       "context_tokens", "status", "outcome"})


def config_key(train_config: Mapping[str, Any], store_digest: str) -> str:
    """The key two trials share exactly when one's result is the other's (module docstring)."""
    # hashed in the flat form the key was first made on, so a trial keeps its key across the change
    text = json.dumps({"train_config": flat_dict(train_config), "store": store_digest}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def find_reusable(tracker, key: str, *, experiment_ids: list[str]):
    """A finished run with ``key`` and a reusable outcome in any of ``experiment_ids`` (the
    oldest first, so that a chain of reuses points at the run that trained), or ``None``."""
    if not experiment_ids:
        return None
    runs = tracker.client.search_runs(experiment_ids, f"tags.config_key = '{key}'", max_results=50,
                                      order_by=["attributes.start_time ASC"])
    for run in runs:
        tags = run.data.tags
        if tags.get("status") in REUSABLE and run.info.status == "FINISHED" and not tags.get("reused_from"):
            return run
    for run in runs:  # only copies left (their source was deleted): a copy holds the whole result too
        if run.data.tags.get("status") in REUSABLE and run.info.status == "FINISHED":
            return run
    return None


def copy_result(tracker, source, target_run_id: str) -> str:
    """Copy ``source``'s metric histories and result tags into ``target_run_id`` and end it with
    the source's outcome (returned)."""
    client = tracker.client
    metrics = []
    for key in sorted(source.data.metrics):
        metrics += client.get_metric_history(source.info.run_id, key)  # Metric entities, logged as they are
    tracker.log_metrics(target_run_id, metrics)
    tags = {k: v for k, v in source.data.tags.items() if k not in _OWN_TAGS and not k.startswith("mlflow.")}
    outcome = source.data.tags["status"]
    # the run that trained: the source's own source when it is a copy (a copy of a copy: its source deleted)
    tags["reused_from"] = source.data.tags.get("reused_from") or source.info.run_id
    tags["reused_from_study"] = source.data.tags.get("reused_from_study") or source.data.tags.get("study", "")
    tracker.end_trial(target_run_id, outcome, **tags)
    return outcome

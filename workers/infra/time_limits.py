"""How long one trial may run before the worker kills it: derived from its budget by default.

A trial's budget (tokens, or a step cap) bounds its compute, but nothing bounded its time: a spec
past the sanity limits, a hung data loader or a machine far slower than planned kept a worker busy
for ever. Every trial task is now sent with a hard time limit (Celery's per-task ``time_limit``;
the worker kills the child and :func:`workers.trials.trial.end_after_time_limit` ends the trial
``failed`` with the reason):

* ``CBS_TRIAL_TIME_LIMIT_S`` when the operator sets it (it replaces the derived limit: raise it for
  a slow machine, lower it to keep trials short);
* otherwise :func:`derived_time_limit_s`: :data:`BASE_S` for start-up and corpus preparation, plus
  the trial's training and evaluation FLOPs at :data:`FLOOR_FLOPS` of its queue, a rate far below
  what any supported device reaches (a loaded CPU core trains the tiny presets at ~10⁹ FLOP/s).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workers.infra.settings import WorkerSettings

#: Seconds every trial gets besides its compute: start-up, preparing a corpus, checkpoints.
BASE_S = 2 * 3600.0
#: The slowest rate a trial may train at before it is taken for hung, FLOP/s, by queue.
FLOOR_FLOPS = {"cpu": 1e8, "gpu": 1e11}


def trial_flops(train_config: Mapping[str, Any]) -> float:
    """Training plus (at most) evaluation FLOPs of a trial: its budget in tokens (``max_tokens``,
    or ``max_steps`` whole batches when smaller) times the preset's FLOPs per token, and the
    evaluation cap ``max_eval_fraction`` of that on top."""
    from cbscore.study.models import model_info

    batch_tokens = int(train_config["batch_size"]) * int(train_config.get("context_tokens", 512))
    tokens = int(train_config["max_tokens"])
    if train_config.get("max_steps"):
        tokens = min(tokens, int(train_config["max_steps"]) * batch_tokens)
    vocab = (train_config.get("data") or {}).get("vocab_size")
    _, per_token = model_info(str(train_config["model"]), int(train_config.get("context_tokens", 512)),
                              int(vocab) if vocab else None)
    return tokens * per_token * (1.0 + float(train_config.get("max_eval_fraction", 0.5)))


def derived_time_limit_s(train_config: Mapping[str, Any], queue: str) -> float:
    """:data:`BASE_S` plus the trial's FLOPs at its queue's :data:`FLOOR_FLOPS`, whole seconds."""
    return float(round(BASE_S + trial_flops(train_config) / FLOOR_FLOPS.get(queue, FLOOR_FLOPS["cpu"])))


def trial_time_limit_s(settings: WorkerSettings, train_config: Mapping[str, Any] | None, queue: str) -> float | None:
    """The hard time limit a trial task is sent with: ``CBS_TRIAL_TIME_LIMIT_S``, else derived from
    ``train_config`` (``None`` only when neither is known: the worker's own setting applies)."""
    if settings.time_limit_s is not None:
        return settings.time_limit_s
    if not train_config:
        return None
    return derived_time_limit_s(train_config, queue)

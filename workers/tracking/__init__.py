"""MLflow: the record of every study and trial. The only package in CBS Lab that imports ``mlflow``.

Layout (DESIGN.md §2). One experiment per study, named after it (experiment tag
``cbs.study=1``). A parent run holds the spec (params for its scalar fields, the JSON in the tag
``cbs.spec`` and ``spec.yaml`` as an artifact) and the study's ``status`` tag. A child run per
trial, linked by ``mlflow.parentRunId``:

* params: the trial's ``TrainConfig`` flattened (``data.source``, ...), its core fields and those
  that differ from the trainer's default (:func:`trial_params`; the whole config is ``trial_spec``);
* tags: ``study``, ``setting``, ``cell``, ``model``, ``batch_size``, ``lr``, ``seed``, ``role``
  (``reference``/``trial``), ``trial_id``, ``attempt``, ``status`` (``queued``, ``running``, then
  the outcome), ``outcome``, ``max_steps``, ``target_loss``, ``resumed_from_step``, ``trial_spec``
  (the TrialSpec JSON), ``worker``, and once it ended ``eval_curve`` (its whole ``eval/loss_ewa``
  curve, so a study's read needs no history call per ended run);
* metrics at ``step=`` optimizer step: ``train/loss``, ``optim/lr``, ``optim/grad_norm``,
  ``perf/tokens_per_s``, ``perf/mfu``, ``eval/loss_ewa`` (best τ), ``eval/loss_ewa_<τ>``,
  ``eval/loss_raw``, ``gns/g2``, ``gns/trace_sigma``, ``gns/b_simple`` (the gradient noise scale
  at log steps, so at every evaluation step too, ``cbscore.train.gns``; B_simple in sequences),
  ``heartbeat`` (wall time, Unix seconds), ``progress/step``, ``progress/tokens``, and the
  ``summary/*`` figures at the end (``steps_to_target``, ``tokens_to_target``, ...).

MLflow run status follows the trial: ``SCHEDULED`` while queued (again after a lost attempt),
``RUNNING`` while a worker holds it, then ``FINISHED`` (reached, censored, finished, diverged —
measurements), ``KILLED`` (pruned, stopped) or ``FAILED`` (failed). One run per trial, reused across
attempts (the ``attempt`` tag counts them).

Reads are cheap: one ``search_runs`` per study (latest metric values come with it) and metric
histories only where needed. Runs that have ended never change, so they and their histories are
cached, in memory and on disk under ``$CBS_HOME/cache`` (a restarted web app asks MLflow only for
what changed since this host last read it).

Modules: ``_base`` (the layout's constants, which errors are transient or out of resources, the
retries, the store and its clients), ``_tracker`` (:class:`Tracker`), ``_disk_cache`` (the on-disk
caches of ended runs) and ``_callback`` (:class:`MlflowCallback`, the trainer's callback, and the
metrics and tags of a result). Import from the package.
"""

# _base first: it sets MLflow's environment before mlflow is imported
from workers.tracking._base import (
                                    CURVE_PREFIXES,
                                    EVAL_CURVE_TAG,
                                    GNS_METRICS,
                                    RESOURCE_ERRNOS,
                                    RUN_STATUS,
                                    TERMINAL_RUN_STATUSES,
                                    TrackingError,
                                    client,
                                    flatten,
                                    is_out_of_resources,
                                    is_transient,
                                    load_service_password,
                                    outage_wait_s,
                                    prepare_store,
                                    retrying,
                                    trial_params,
                                    wait_out,
)
from workers.tracking._callback import (
                                    LeaseLost,
                                    LeaseUnknown,
                                    MlflowCallback,
                                    TrackingOutage,
                                    eval_curve_json,
                                    eval_curve_tag,
                                    eval_metrics,
                                    metric,
                                    outage_hold_s,
                                    result_tags,
                                    summary_metrics,
)
from workers.tracking._disk_cache import _curve_bytes, prune_disk_cache
from workers.tracking._tracker import Tracker

__all__ = [
    "CURVE_PREFIXES", "EVAL_CURVE_TAG", "GNS_METRICS", "RESOURCE_ERRNOS", "RUN_STATUS", "TERMINAL_RUN_STATUSES",
    "TrackingError", "client", "flatten", "is_out_of_resources", "is_transient", "load_service_password",
    "outage_wait_s", "prepare_store", "retrying", "trial_params", "wait_out", "_curve_bytes", "prune_disk_cache",
    "Tracker", "LeaseLost", "LeaseUnknown", "MlflowCallback", "eval_curve_json", "eval_curve_tag", "eval_metrics",
    "metric", "result_tags", "summary_metrics", "TrackingOutage", "outage_hold_s",
]

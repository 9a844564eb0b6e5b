"""Thin Celery tasks: ids in, JSON out; the work is in plain functions tests call directly.

Never imports torch (the worker parent imports this module; training is imported inside the
trial function, in the child process).
"""

from __future__ import annotations

from celery import Task
from celery.utils.log import get_task_logger

from workers.infra.broker import app

_log = get_task_logger(__name__)


class TrialTask(Task):
    """Ends a trial killed at the hard time limit ``failed`` (in the worker's parent, where
    Celery reports the timeout) instead of leaving it to look like a lost worker. Its late ack
    survives a broker outage (:mod:`workers.infra.acks`)."""

    Request = "workers.infra.acks:LateAckRequest"

    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        from celery.exceptions import TimeLimitExceeded

        if isinstance(exc, TimeLimitExceeded) and len(args) >= 2:
            from workers.trials.trial import end_after_time_limit

            try:
                limit = float(exc.args[0]) if exc.args else None
            except (TypeError, ValueError):
                limit = None
            try:
                from workers.trials.celery_app import worker_nodename

                end_after_time_limit(args[0], args[1], worker_nodename(), limit)
            except Exception as err:  # noqa: BLE001 - the runner then sees it as lost, as before
                _log.warning(f"cbs worker: could not end {args[1]} after its time limit: {err}")


@app.task(name="workers.tasks.run_trial", bind=True, base=TrialTask)
def run_trial(self, study: str, trial_id: str, attempt: int) -> dict:
    """Run one attempt of one trial (task id ``{trial_id}-a{attempt}``); see :mod:`workers.trials.trial`."""
    from workers.trials.trial import run_trial_attempt

    return run_trial_attempt(study, trial_id, int(attempt), worker=self.request.hostname or "")

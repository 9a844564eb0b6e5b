"""Thin Celery tasks: ids in, JSON out; the work is in plain functions tests call directly.

Never imports torch (the worker parent imports this module; training is imported inside the
trial function, in the child process).
"""

from __future__ import annotations

from workers.celery_app import app


@app.task(name="workers.tasks.run_trial", bind=True)
def run_trial(self, study: str, trial_id: str, attempt: int) -> dict:
    """Run one attempt of one trial (task id ``{trial_id}-a{attempt}``); see :mod:`workers.trial`."""
    from workers.trial import run_trial_attempt

    return run_trial_attempt(study, trial_id, int(attempt), worker=self.request.hostname or "")

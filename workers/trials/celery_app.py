"""The worker process's side of the Celery app (``celery -A workers.trials.celery_app``): the worker's
presence in the ledger, the preload of MLflow and the trainer in a CPU worker's parent, device
pinning in each pool child, and the shutdown that checkpoints running trials back to the queue.
The app itself and its configuration are :mod:`workers.infra.broker` (re-exported here).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from celery import signals

from workers.infra.broker import TRIAL_TASK, app, configure, reconfigure  # noqa: F401 (the app celery -A loads)
from workers.infra.settings import WorkerSettings

_log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- worker presence
class _Presence:
    """The worker parent's heartbeat in the ledger (``cbs_workers``), every ``CBS_HEARTBEAT_S``.

    A thread in a process that forks: the pool forks a fresh child after every trial, and a fork
    taken while the thread is inside SQLite would leave the child with a lock nobody releases. So
    the thread holds ``self.lock`` while it writes, and ``os.register_at_fork`` takes the same lock
    around every fork.
    """

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.nodename = ""
        os.register_at_fork(before=self.lock.acquire, after_in_parent=self.lock.release,
                            after_in_child=self._child)

    def _child(self) -> None:
        self.lock.release()
        self.stop = threading.Event()
        self.thread = None
        self.nodename = ""  # a child never unregisters its parent

    def start(self, nodename: str, concurrency: int) -> None:
        from workers.studies.ledger import Ledger, WorkerRow, host_id

        s = WorkerSettings.from_env()
        self.nodename = nodename
        queue = os.environ.get("CBS_WORKER_QUEUE", "cpu")
        device = os.environ.get("CBS_WORKER_DEVICE", queue)
        started = time.time()

        def beat() -> None:
            while True:
                row = WorkerRow(nodename=nodename, hostname=host_id(), pid=os.getpid(), device=device,
                                queue=queue, concurrency=concurrency, started_s=started, heartbeat_s=time.time())
                with self.lock:
                    try:  # the ledger made here: a database that is down at start is waited out
                        Ledger(s.ledger_url).worker_beat(row)
                    except Exception as exc:  # a ledger hiccup must not kill the worker; say so and retry
                        _log.warning(f"cbs worker: presence heartbeat failed: {exc}")
                if self.stop.wait(s.heartbeat_s):
                    return

        self.thread = threading.Thread(target=beat, name="cbs-presence", daemon=True)
        self.thread.start()

    def end(self) -> None:
        from workers.studies.ledger import Ledger

        self.stop.set()
        if self.nodename:
            with self.lock:
                Ledger(WorkerSettings.from_env().ledger_url).worker_gone(self.nodename)


_PRESENCE = _Presence()


def worker_nodename() -> str:
    """This worker's Celery node name (``cpu@host``) in its parent process, once it is ready."""
    return _PRESENCE.nodename or ""


@signals.worker_init.connect
def _preload(**_: object) -> None:
    """Import MLflow once in the parent (forked children reuse it; it never touches CUDA), and on
    a CPU worker torch and the trainer too: each trial's fresh child then starts training at once
    instead of importing them again (seconds per trial). A GPU worker's parent never imports
    torch, so CUDA can only ever be initialised in a child."""
    import workers.tracking  # noqa: F401

    if os.environ.get("CBS_WORKER_DEVICE") == "cpu":
        import cbscore.train.trainer  # noqa: F401
        import workers.trials.trial  # noqa: F401


@signals.worker_process_init.connect
def _pin_devices(**_: object) -> None:
    """In each pool child of a GPU worker: narrow ``CUDA_VISIBLE_DEVICES`` to the child's own GPU
    group before anything touches CUDA (``cbs worker --gpus … --devices-per-trial K``)."""
    from workers.trials.devices import pin_child

    pin_child()


@signals.worker_ready.connect
def _worker_ready(sender=None, **_: object) -> None:
    _PRESENCE.start(sender.hostname, int(sender.controller.concurrency or 1))


@signals.worker_shutting_down.connect
def _worker_shutting_down(sender=None, **_: object) -> None:
    """A shutdown began (in the parent): ask this worker's running trials to stop at a checkpoint
    and go back to the queue, so a warm shutdown (SIGTERM) ends in seconds, not when the trials
    end, and costs them no attempt. (A cold shutdown may kill them first: they are then lost.)"""
    from workers.studies.ledger import Ledger

    try:
        Ledger(WorkerSettings.from_env().ledger_url).interrupt_worker(str(sender))
    except Exception as exc:  # shutting down anyway: the runner recovers the trials as lost
        _log.warning(f"cbs worker: could not interrupt running trials: {exc}")


@signals.worker_shutdown.connect
def _worker_shutdown(**_: object) -> None:
    _PRESENCE.end()

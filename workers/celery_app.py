"""The Celery app: JSON only, late acks, one trial per child process, queues by device.

* Broker: kombu's filesystem transport under ``$CBS_HOME/broker`` (no daemon; polled every
  ``CBS_BROKER_POLL_S`` ≤ 0.1 s) unless ``CBS_BROKER_URL`` names Redis or RabbitMQ.
* No result backend: MLflow is the record of every trial (``task_ignore_result``).
* ``task_acks_late`` + ``task_reject_on_worker_lost``: a task whose child dies is requeued; the
  attempt cap lives in the ledger (:mod:`workers.ledger`), not in Celery, so a trial that kills
  its worker ``CBS_MAX_ATTEMPTS`` times ends ``failed`` instead of looping.
* ``worker_prefetch_multiplier=1``, ``worker_max_tasks_per_child=1`` (prefork): a trial never
  waits behind another in a prefetch buffer, and each runs in a fresh child process, so CUDA is
  only ever initialised in a child (a GPU worker's parent imports neither torch nor
  cbscore.train; a CPU worker's parent preloads them for its children).
* Queues ``cpu`` and ``gpu``; ``cbs worker`` consumes the one of its device.
* A broker outage is waited out: the worker reconnects however long it lasts, a running trial
  carries on, and an ack that fails meanwhile does not stop the worker from consuming again
  (:mod:`workers.acks`). Redis connections time out instead of hanging on a silent network cut.

Settings are read from the environment when this module is imported (``workers.settings``).
"""

from __future__ import annotations

import os
import threading
import time

from celery import Celery, signals
from kombu import Queue

from workers.settings import QUEUES, WorkerSettings

TRIAL_TASK = "workers.tasks.run_trial"


def configure(app: Celery, s: WorkerSettings) -> None:
    """Apply ``s`` to ``app`` (the module-level app is configured from the environment)."""
    transport_options: dict = {}
    if s.embedded_broker:
        folder = s.broker_dir
        for sub in ("queue", "processed", "control"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        transport_options = {
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "processed_folder": str(folder / "processed"),
            "control_folder": str(folder / "control"),
            "store_processed": False,
            "polling_interval": s.broker_poll_s,
        }
    elif s.broker_url.startswith(("redis://", "rediss://")):
        transport_options = {
            # A trial can run for hours: a redelivery before it ends only finds the lease held and exits.
            "visibility_timeout": 6 * 3600,
            # A broker gone without closing the connection (a network cut, a failover): a publish or
            # an ack fails after these seconds instead of waiting forever, and kombu's health checks
            # (every 25 s) drop a consuming connection that stopped answering.
            "socket_timeout": 15.0,
            "socket_connect_timeout": 5.0,
            "socket_keepalive": True,
        }
    app.conf.update(
        broker_url=s.broker_url,
        broker_transport_options=transport_options,
        # A broker outage is waited out, at start and after a lost connection, however long it lasts
        # (Celery's default gives up after 100 tries); a late ack it misses is handled in workers.acks.
        broker_connection_retry_on_startup=True,
        broker_connection_retry=True,
        broker_connection_max_retries=None,
        # A trial needs no broker while it trains (the ledger fences it): a lost connection must not
        # kill it (Celery 6 makes True the default).
        worker_cancel_long_running_tasks_on_connection_loss=False,
        result_backend=None,
        task_ignore_result=True,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        worker_max_tasks_per_child=1,
        worker_pool="workers.pool:TaskPool",  # prefork, safe against an idle child killed (workers.pool)
        task_soft_time_limit=s.soft_time_limit_s,
        task_time_limit=s.time_limit_s,
        task_queues=tuple(Queue(q, routing_key=q) for q in QUEUES),
        task_default_queue="cpu",
        task_create_missing_queues=False,
        # Off unless the operator asks (CBS_WORKER_REMOTE_CONTROL=1): with it, anyone who can write to
        # Redis could shut the workers down. Presence lives in the ledger; cancelling in the leases.
        worker_enable_remote_control=s.remote_control and not s.embedded_broker,
        worker_send_task_events=False,
        task_send_sent_event=False,
        worker_hijack_root_logger=False,
        enable_utc=True,
    )


app = Celery("cbslab", include=["workers.tasks"])
configure(app, WorkerSettings.from_env())


def reconfigure(settings: WorkerSettings | None = None) -> None:
    """Apply the current environment (or ``settings``) to ``app`` and drop its pooled connections
    (a long-lived process whose environment changed: tests, the app after a settings change)."""
    from kombu import pools

    configure(app, settings or WorkerSettings.from_env())
    if app._pool is not None:
        app._pool.force_close_all()
        app._pool = None
    pools.reset()  # kombu's process-wide producer pools, keyed by broker URL, would keep the old pool
    app.amqp._producer_pool = None


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
        from workers.ledger import Ledger, WorkerRow, host_id

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
                        print(f"cbs worker: presence heartbeat failed: {exc}", flush=True)
                if self.stop.wait(s.heartbeat_s):
                    return

        self.thread = threading.Thread(target=beat, name="cbs-presence", daemon=True)
        self.thread.start()

    def end(self) -> None:
        from workers.ledger import Ledger

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
        import cbscore.train  # noqa: F401
        import workers.trial  # noqa: F401


@signals.worker_process_init.connect
def _pin_devices(**_: object) -> None:
    """In each pool child of a GPU worker: narrow ``CUDA_VISIBLE_DEVICES`` to the child's own GPU
    group before anything touches CUDA (``cbs worker --gpus … --devices-per-trial K``)."""
    from workers.devices import pin_child

    pin_child()


@signals.worker_ready.connect
def _worker_ready(sender=None, **_: object) -> None:
    _PRESENCE.start(sender.hostname, int(sender.controller.concurrency or 1))


@signals.worker_shutting_down.connect
def _worker_shutting_down(sender=None, **_: object) -> None:
    """A shutdown began (in the parent): ask this worker's running trials to stop at a checkpoint
    and go back to the queue, so a warm shutdown (SIGTERM) ends in seconds, not when the trials
    end, and costs them no attempt. (A cold shutdown may kill them first: they are then lost.)"""
    from workers.ledger import Ledger

    try:
        Ledger(WorkerSettings.from_env().ledger_url).interrupt_worker(str(sender))
    except Exception as exc:  # shutting down anyway: the runner recovers the trials as lost
        print(f"cbs worker: could not interrupt running trials: {exc}", flush=True)


@signals.worker_shutdown.connect
def _worker_shutdown(**_: object) -> None:
    _PRESENCE.end()

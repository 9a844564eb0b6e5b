"""The Celery app and its configuration: JSON only, late acks, one trial per child process, queues by device.

* Broker: kombu's filesystem transport under ``$CBS_HOME/broker`` (no daemon; polled every
  ``CBS_BROKER_POLL_S`` ≤ 0.1 s) unless ``CBS_BROKER_URL`` names Redis or RabbitMQ.
* No result backend: MLflow is the record of every trial (``task_ignore_result``).
* ``task_acks_late`` + ``task_reject_on_worker_lost``: a task whose child dies is requeued; the
  attempt cap lives in the ledger (:mod:`workers.studies.ledger`), not in Celery, so a trial that kills
  its worker ``CBS_MAX_ATTEMPTS`` times ends ``failed`` instead of looping.
* ``worker_prefetch_multiplier=1``, ``worker_max_tasks_per_child=1`` (prefork): a trial never
  waits behind another in a prefetch buffer, and each runs in a fresh child process, so CUDA is
  only ever initialised in a child (a GPU worker's parent imports neither torch nor
  cbscore.train.trainer; a CPU worker's parent preloads them for its children).
* Queues ``cpu`` and ``gpu``; ``cbs worker`` consumes the one of its device.
* A broker outage is waited out: the worker reconnects however long it lasts, a running trial
  carries on, and an ack that fails meanwhile does not stop the worker from consuming again
  (:mod:`workers.infra.acks`). Redis connections time out instead of hanging on a silent network cut.

Settings are read from the environment when this module is imported (``workers.infra.settings``).

What sends tasks (the runner, the trial that gives its attempt back) imports this module; what
only a worker process needs (its presence in the ledger, the preload of the trainer, device
pinning: Celery's worker signals) lives in :mod:`workers.trials.celery_app`, the module ``celery -A``
loads, so that sending a task never imports the trial code that sends tasks.
"""

from __future__ import annotations

from celery import Celery
from kombu import Queue

from workers.infra.settings import QUEUES, WorkerSettings

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
        # (Celery's default gives up after 100 tries); a late ack it misses is handled in workers.infra.acks.
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
        worker_pool="workers.infra.pool:TaskPool",  # prefork, safe against an idle child killed (workers.infra.pool)
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


app = Celery("cbslab", include=["workers.trials.tasks"])
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

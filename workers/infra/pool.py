"""The prefork pool the workers run, safe against a pool child killed while it waits for a task.

Without an event loop (the filesystem broker: kombu's filesystem transport is polled, so Celery
uses billiard's plain ``Pool``, not its ``AsynPool`` with one pipe per child), every idle child of
a worker reads the pool's one task pipe, and billiard's reader holds the pipe's read lock (a
semaphore shared by the children) *while it blocks* in ``recv``. A child killed there (an OOM kill,
the chaos run's ``kill -9`` of an idle child) takes the lock with it: no other child ever reads a
task again, the worker looks alive, and its reserved messages wait forever.

Here a child waits for the pipe to become readable *without* the lock and takes the lock only to
read a message that is already there, a few microseconds. Several idle children wake for one
message; the first reads it, the others find the pipe empty under the lock and wait again. With
Redis or AMQP Celery runs ``AsynPool`` (one pipe per child, no shared lock), which this leaves as
it is.
"""

from __future__ import annotations

import pickle

from billiard import pool as billiard_pool
from celery.concurrency import prefork


class IdleSafeWorker(billiard_pool.Worker):
    """A pool child that never holds the task pipe's read lock while it waits (module docstring)."""

    def _make_recv_method(self, conn):
        reader, rlock = getattr(conn, "_reader", None), getattr(conn, "_rlock", None)
        if reader is None or rlock is None:  # a queue without the shared lock: nothing to guard
            return super()._make_recv_method(conn)
        poll, loads = reader.poll, pickle.loads

        def receive(timeout):
            if not poll(timeout):  # wait without the lock
                return False, None
            if not rlock.acquire(timeout=timeout):
                return False, None
            try:
                if not poll(0):  # another idle child read it first
                    return False, None
                payload = reader.recv_bytes()
            finally:
                rlock.release()
            return True, loads(payload)

        return receive


class IdleSafePool(billiard_pool.Pool):
    """billiard's blocking pool with :class:`IdleSafeWorker` children."""

    Worker = IdleSafeWorker


class TaskPool(prefork.TaskPool):
    """Celery's prefork pool (``worker_pool``), blocking variant made idle-safe."""

    BlockingPool = IdleSafePool

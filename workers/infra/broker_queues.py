"""How many task messages wait in a queue of the broker (the runner resends a lost task only when
its queue is empty; the CLI's tests check nothing was enqueued)."""

from __future__ import annotations


def queue_depth(queue: str) -> int:
    """Messages waiting in ``queue`` (works for the filesystem transport, Redis and AMQP)."""
    from workers.infra.broker import app

    with app.connection_for_read() as conn:
        channel = conn.default_channel  # a broker that is away raises here: the pass fails, no send
        try:
            return int(channel.queue_declare(queue=queue, passive=True).message_count)
        except Exception:  # a queue never declared holds nothing
            return 0

"""Late acknowledgements that survive a broker outage (the worker parent's side of a trial's message).

A trial's message is acknowledged when the trial ends (``task_acks_late``), often minutes or hours
after it was taken. If the broker is away at that moment, the ack fails. Celery logs "Couldn't
ack" and goes on, but kombu's Redis transport counts the message as still held by this worker:
its ``QoS.ack`` removes it from the broker's index of unacknowledged messages first and frees the
prefetch slot only after that write, so the failed write keeps the slot. With
``worker_prefetch_multiplier=1`` that was the worker's last slot: it stopped asking the broker for
messages (kombu no longer polls its Redis connection), so it never saw that the connection was
dead, never reconnected and never consumed again (the same symptom as
celery/celery#9054). A cut while the trial trains is enough: the ack then meets the dead pooled
connection even when the broker is back. A failed ``reject`` (a child lost during an outage)
holds the slot the same way.

:class:`LateAckRequest` tries once more (on a fresh connection) and, when the broker still cannot
be told, frees the slot locally. The message then stays unacknowledged in the broker and comes
back after the visibility timeout; its task finds the trial's lease ended, or held, and exits
without training (:mod:`workers.trials.trial`), so nothing runs twice. Kombu's own reconnection then does the rest: the freed slot puts the
connection back in the poll, its loss is seen, and the consumer reconnects, waiting out the
outage (``broker_connection_max_retries=None``).
"""

from __future__ import annotations

import logging

from celery.worker.request import Request
from kombu.transport import virtual

logger = logging.getLogger(__name__)


class LateAckRequest(Request):
    """A task request whose ack or reject, failing on a lost broker, frees its prefetch slot."""

    def acknowledge(self) -> None:
        if not self.acknowledged:
            self._settle(self._message.ack, "acknowledge")
            self.acknowledged = True

    def reject(self, requeue: bool = False) -> None:
        if not self.acknowledged:
            self._settle(lambda: self._message.reject(requeue=requeue), "reject")
            self.acknowledged = True
            self.send_event("task-rejected", requeue=requeue)

    def _settle(self, settle, what: str) -> None:
        for _attempt in (1, 2):  # a connection cut earlier (a broker back by now) fails once, then reconnects
            try:
                settle()
                return
            except self._connection_errors as exc:
                error = exc
        logger.warning("cbs worker: could not %s task %s: the broker is unreachable (%r); its message comes back "
                       "after the visibility timeout, and this worker takes new ones once it reconnects",
                       what, self.id, error)
        free_slot(self._message)


def free_slot(message) -> bool:
    """Drop ``message`` from its channel's count of unacknowledged deliveries, without telling the
    broker (which cannot be reached); True when the channel keeps such a count (kombu's virtual
    transports; AMQP counts on the server, and a new channel starts from zero)."""
    qos = getattr(message.channel, "qos", None)
    if not isinstance(qos, virtual.QoS):
        return False
    virtual.QoS.ack(qos, message.delivery_tag)  # the base class's ack is the local bookkeeping alone
    return True

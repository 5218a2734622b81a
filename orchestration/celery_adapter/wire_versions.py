"""Rolling deploys: every ``agentloop.*`` message says its wire version; a worker runs only what it reads.

During a deploy, workers of the old and the new code consume the same queues.
A message is safe with any worker whose wire version
(:data:`~agentloop.orchestration.wire.WIRE_VERSION`, or
``AGENTLOOP_WIRE_VERSION_OVERRIDE`` when rehearsing) is at least the message's:

* **Producer.** :func:`stamp` writes the app's version into the
  :data:`~agentloop.orchestration.wire.WIRE_HEADER` header of every
  ``agentloop.*`` message the app builds (the app's AMQP class,
  :class:`~agentloop.orchestration.celery_adapter.privacy.PrivateAMQP`, calls it:
  ``send_task``, a chain's next task, a chord's merge, a canvas). A message
  without the header (a client that sends with Celery alone, a producer older
  than the header) is version 1, today's, and always accepted.
* **Worker.** The edge (:class:`~agentloop.orchestration.celery_adapter.edge_consumer.EdgeConsumer`)
  asks :func:`too_new` of each message. One written for a newer version goes
  back to its queue for a newer worker (:meth:`WireGate.defer`): published again,
  at the back, with :data:`~agentloop.orchestration.wire.DEFERRALS_HEADER` one
  higher, then acknowledged. After :data:`MAX_DEFERRALS` times it is parked in
  the holding queue of its version (:func:`holding_queue`), which only workers
  of that version or newer consume, with a warning naming it. It is never
  failed, never run by a worker that cannot read it, never dropped: if the
  worker dies between publishing the copy and acknowledging the original, the
  broker delivers the original again too (a duplicate the run store's records
  make harmless, as for any redelivery).

A header that is not a positive integer is a malformed message, refused by
the edge like any other (``edge.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping
from typing import Any

from celery import Celery

from agentloop.orchestration.wire import (
    DEFERRALS_HEADER,
    WIRE_HEADER,
    WIRE_VERSION,
    wire_version_of,
)

__all__ = ["MAX_DEFERRALS", "WireGate", "app_wire_version", "holding_queue", "stamp", "too_new"]

logger = logging.getLogger(__name__)

#: How many times older workers hand a too-new message back to its queue before it is parked.
MAX_DEFERRALS = 10
#: The message properties a deferred copy keeps (kombu's ``Producer.publish`` arguments).
_KEPT_PROPERTIES = ("correlation_id", "reply_to", "priority", "delivery_mode")


def app_wire_version(app: Celery) -> int:
    """The wire version ``app`` sends and reads up to: its settings' (``create_app``), else the code's."""
    dependencies = getattr(app, "agentloop_dependencies", None)
    settings = getattr(dependencies, "settings", None)
    version = getattr(settings, "wire_version", WIRE_VERSION)
    return version if isinstance(version, int) else WIRE_VERSION


def stamp(app: Celery, name: Any, headers: MutableMapping[str, Any]) -> None:
    """Write ``app``'s wire version into the headers of an ``agentloop.*`` message ``name``."""
    if isinstance(name, str) and name.startswith("agentloop."):
        headers[WIRE_HEADER] = app_wire_version(app)


def too_new(headers: Mapping[str, Any], version: int) -> int | None:
    """The message's wire version when it is above ``version`` (what a worker reads), else ``None``."""
    found = wire_version_of(headers)
    return found if found is not None and found > version else None


def holding_queue(app: Celery, version: int) -> str:
    """The queue where messages of wire ``version`` wait for a worker that reads it."""
    return f"{app.conf.task_default_queue}.wire.{version}"


class WireGate:
    """A worker's side of the version check: the holding queues it reads, and deferring a message."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.version = app_wire_version(app)

    def holding_queues(self) -> list[str]:
        """The holding queues of every version above 1 up to this worker's (it reads them all)."""
        return [holding_queue(self.app, version) for version in range(2, self.version + 1)]

    def consume_holding_queues(self) -> None:
        """Add the holding queues to those the worker consumes (whatever ``-Q`` selected)."""
        queues = self.app.amqp.queues
        for name in self.holding_queues():
            queues.select_add(name)

    def defer(self, message: Any, version: int) -> str:
        """Hand ``message`` (of wire ``version``, above this worker's) on; returns where it went.

        Published again first, acknowledged after: a crash in between leaves a duplicate, never a loss.
        """
        headers = dict(message.headers)
        deferrals = headers.get(DEFERRALS_HEADER, 0)
        deferrals = deferrals + 1 if isinstance(deferrals, int) and not isinstance(deferrals, bool) else 1
        headers[DEFERRALS_HEADER] = deferrals
        info = message.delivery_info or {}
        properties = message.properties or {}
        kept = {name: properties[name] for name in _KEPT_PROPERTIES if properties.get(name) is not None}
        parked = deferrals > MAX_DEFERRALS
        declare: list[Any] = []
        if parked:
            queue = self.app.amqp.queues.select_add(holding_queue(self.app, version))
            exchange, routing_key, declare = queue.exchange, queue.routing_key, [queue]
        else:  # the way it came: its queue exists, it was just read from
            exchange = info.get("exchange") or ""
            routing_key = info.get("routing_key") or self.app.conf.task_default_queue
        with self.app.producer_or_acquire() as producer:
            producer.publish(
                message.body,
                exchange=exchange,
                routing_key=routing_key,
                headers=headers,
                content_type=message.content_type,
                content_encoding=message.content_encoding,
                declare=declare,
                retry=True,
                retry_policy=self.app.conf.task_publish_retry_policy,
                **kept,
            )
        message.ack()
        where = routing_key if not parked else f"the holding queue {routing_key}"
        task, task_id = headers.get("task"), headers.get("id")
        if parked:
            logger.warning(
                "Parked %s[%s] in %s: wire version %d, this worker reads up to %d; "
                "a worker of version %d or newer takes it",
                task, task_id, where, version, self.version, version,
            )  # fmt: skip
        else:
            logger.info(
                "Deferred %s[%s] to %s (%d of %d): wire version %d, this worker reads up to %d",
                task, task_id, where, deferrals, MAX_DEFERRALS, version, self.version,
            )  # fmt: skip
        return where

"""Rolling deploys: every ``agentloop.*`` message says its wire version; a worker runs only what it reads.

During a deploy, workers of the old and the new code consume the same queues.
A message is safe with any worker whose wire version
(:data:`~agentloop.orchestration.wire.WIRE_VERSION`, or
``AGENTLOOP_WIRE_VERSION_OVERRIDE`` when rehearsing) is at least the message's:

* **Producer.** :func:`stamp` writes the version the message needs (1, or 2 for one carrying a
  concurrency key or a priority) into the
  :data:`~agentloop.orchestration.wire.WIRE_HEADER` header of every
  ``agentloop.*`` message the app builds (the app's AMQP class,
  :class:`~agentloop.orchestration.celery_adapter.privacy.PrivateAMQP`, calls it:
  ``send_task``, a chain's next task, a chord's merge, a canvas). A message
  without the header (a client that sends with Celery alone, a producer older
  than the header) is version 1, today's, and always accepted.
* **Worker.** The edge (:class:`~agentloop.orchestration.celery_adapter.edge_consumer.EdgeConsumer`)
  asks :func:`too_new` of each message. One written for a newer version is
  parked at once in the holding queue of its version (:func:`holding_queue`,
  :meth:`WireGate.defer`): published there with
  :data:`~agentloop.orchestration.wire.DEFERRALS_HEADER` one higher, then
  acknowledged, with a warning naming it. It is never failed, never run by a
  worker that cannot read it, never dropped: if the worker dies between
  publishing the copy and acknowledging the original, the broker delivers the
  original again too (a duplicate the run store's records make harmless, as
  for any redelivery).
* **Holding queues.** A worker consumes the holding queues of every version
  above 1 up to its own (:meth:`WireGate.consume_holding_queues`), whatever its
  ``-Q``, so the first newer worker takes what older ones parked. It never
  consumes a holding queue of a version above its own: it declares one to
  publish into and nothing more (:func:`holding_queue_entity`; a queue added to
  Celery's consumed set would be read after the next broker reconnect, and the
  worker would re-park its own parked messages hundreds of times a second:
  issue 33). Each holding queue is declared like the default queue it stands
  in for (on RabbitMQ quorum, ``x-delivery-limit``, dead-lettered to
  ``<queue>.dead``), by the publishing and the consuming side alike.

Why park at once. Releases before this one handed a too-new message back to
its own queue ten times before parking it; the ten hand-ons ran back to back
in some 30-40 ms, which gives no newer worker a chance, and spacing them out
would hold the message (an ETA, or a delayed exchange) for nothing: a newer
worker reads every holding queue up to its own version, so a parked message
reaches it as soon as it would have in its old queue. The
:data:`~agentloop.orchestration.wire.DEFERRALS_HEADER` of a message those older
workers re-published is still read (and checked by the edge) and counted on.

A header that is not a positive integer, or a version more than
:data:`~agentloop.orchestration.wire.MAX_VERSIONS_AHEAD` above the worker's,
is a malformed message, refused by the edge like any other (``edge.py``):
every forged value would otherwise make a queue of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping
from contextlib import suppress
from typing import Any

from celery import Celery
from kombu.entity import Queue

from agentloop.orchestration.celery_adapter.config import dead_letter_queue_name
from agentloop.orchestration.wire import (
    DEFERRALS_HEADER,
    MAX_VERSIONS_AHEAD,
    WIRE_HEADER,
    WIRE_VERSION,
    needed_version,
    wire_version_of,
)

__all__ = [
    "WireGate",
    "app_wire_version",
    "holding_queue",
    "holding_queue_entity",
    "reported_queues",
    "sent_version",
    "stamp",
    "too_new",
]

logger = logging.getLogger(__name__)

#: AMQP's reply code for a declare whose arguments differ from the existing queue's.
_PRECONDITION_FAILED = 406
#: The message properties a parked copy keeps (kombu's ``Producer.publish`` arguments).
_KEPT_PROPERTIES = ("correlation_id", "reply_to", "priority", "delivery_mode")


def app_wire_version(app: Celery) -> int:
    """The wire version ``app`` sends and reads up to: its settings' (``create_app``), else the code's."""
    dependencies = getattr(app, "agentloop_dependencies", None)
    settings = getattr(dependencies, "settings", None)
    version = getattr(settings, "wire_version", WIRE_VERSION)
    return version if isinstance(version, int) else WIRE_VERSION


def stamp(
    app: Celery, name: Any, headers: MutableMapping[str, Any], args: Any = None, kwargs: Any = None
) -> None:
    """Write the wire version of an ``agentloop.*`` message ``name`` into its headers: the lowest
    version that reads it (:func:`~agentloop.orchestration.wire.needed_version` of its name,
    ``args`` and ``kwargs``: 1 unless it is a pack's or carries a concurrency key or a priority),
    so a worker of an older release runs every message it can read and parks only the others. With
    ``AGENTLOOP_WIRE_VERSION_OVERRIDE`` (a rehearsal) every message says the override."""
    if isinstance(name, str) and name.startswith("agentloop."):
        headers[WIRE_HEADER] = sent_version(app, args, kwargs, name)


def sent_version(app: Celery, args: Any = None, kwargs: Any = None, name: Any = None) -> int:
    """The wire version ``app`` stamps on a message of ``args`` and ``kwargs`` (see :func:`stamp`)."""
    dependencies = getattr(app, "agentloop_dependencies", None)
    override = getattr(getattr(dependencies, "settings", None), "wire_version_override", None)
    if isinstance(override, int):
        return override
    return min(app_wire_version(app), needed_version(args, kwargs, name))


def too_new(headers: Mapping[str, Any], version: int) -> int | None:
    """The message's wire version when it is above ``version`` (what a worker reads), else ``None``."""
    found = wire_version_of(headers)
    return found if found is not None and found > version else None


def holding_queue(app: Celery, version: int) -> str:
    """The queue where messages of wire ``version`` wait for a worker that reads it."""
    return f"{app.conf.task_default_queue}.wire.{version}"


def holding_queue_entity(app: Celery, version: int) -> Queue:
    """The holding queue of ``version`` as kombu declares it: the default queue's exchange, type and
    arguments (quorum, delivery limit, dead-lettering on RabbitMQ), under its own name and routing key.

    Never added to ``app.amqp.queues``: what is there a worker consumes after a reconnect, and
    ``agentloop_queue_depth`` reports."""
    main = app.amqp.queues[str(app.conf.task_default_queue)]
    name = holding_queue(app, version)
    return Queue(  # type: ignore[no-untyped-call]
        name,
        main.exchange,
        routing_key=name,
        durable=main.durable,
        queue_arguments=dict(main.queue_arguments or {}),
    )


def reported_queues(app: Celery) -> list[str]:
    """Every queue whose depth ``agentloop_queue_depth`` reports (a bounded set): the app's own,
    its dead-letter queue, and the holding queues of versions 2 to :data:`MAX_VERSIONS_AHEAD`
    above the app's (where its workers park, and what they read)."""
    default = str(app.conf.task_default_queue)
    versions = range(2, app_wire_version(app) + MAX_VERSIONS_AHEAD + 1)
    names = {*app.amqp.queues, default, dead_letter_queue_name(default)}
    names.update(holding_queue(app, version) for version in versions)
    return sorted(names)


class WireGate:
    """A worker's side of the version check: the holding queues it reads, and parking a message."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.version = app_wire_version(app)
        self._entities: dict[int, tuple[Queue, list[Queue]]] = {}

    def holding_queues(self) -> list[str]:
        """The holding queues of every version above 1 up to this worker's (it reads them all)."""
        return [holding_queue(self.app, version) for version in range(2, self.version + 1)]

    def consume_holding_queues(self) -> None:
        """Add the holding queues of this worker's versions to those it consumes (whatever ``-Q``
        selected), declared like the default queue."""
        queues = self.app.amqp.queues
        for version in range(2, self.version + 1):
            queues.select_add(holding_queue_entity(self.app, version))

    def _holding(self, version: int) -> tuple[Queue, list[Queue]]:
        """The holding queue of ``version``, and what each publish into it declares: the queue
        itself, or nothing when the broker holds one of that name declared otherwise (a classic
        queue an older release made: RabbitMQ refuses the quorum declare, ``PRECONDITION_FAILED``).
        Then the message is parked in the queue as it is, with a warning: never refused, never
        looped; ``docs/how-to/rabbitmq.md`` says how an operator replaces it."""
        found = self._entities.get(version)
        if found is not None:
            return found
        queue = holding_queue_entity(self.app, version)
        declare = [queue]
        with self.app.connection_for_write() as connection:
            channel = connection.channel()
            try:
                queue(channel).declare()  # type: ignore[no-untyped-call]
            except connection.channel_errors as error:
                if getattr(error, "code", None) != _PRECONDITION_FAILED:
                    raise
                declare = []
                logger.warning(
                    "The holding queue %s exists with other arguments than %s's (%s): messages are "
                    "parked in it as it is; drain and delete it (docs/how-to/rabbitmq.md)",
                    queue.name, self.app.conf.task_default_queue, error,
                )  # fmt: skip
            finally:
                with suppress(Exception):  # closed by the broker already (the refused declare)
                    channel.close()
        self._entities[version] = (queue, declare)
        return queue, declare

    def defer(self, message: Any, version: int) -> str:
        """Park ``message`` (of wire ``version``, above this worker's) in its version's holding queue;
        returns where it went. Published first, acknowledged after: a crash in between leaves a
        duplicate, never a loss. The holding queue is declared, never consumed (the module doc)."""
        headers = dict(message.headers)
        deferrals = headers.get(DEFERRALS_HEADER, 0)
        deferrals = deferrals + 1 if isinstance(deferrals, int) and not isinstance(deferrals, bool) else 1
        headers[DEFERRALS_HEADER] = deferrals
        properties = message.properties or {}
        kept = {name: properties[name] for name in _KEPT_PROPERTIES if properties.get(name) is not None}
        queue, declare = self._holding(version)
        with self.app.producer_or_acquire() as producer:
            producer.publish(
                message.body,
                exchange=queue.exchange,
                routing_key=queue.routing_key,
                headers=headers,
                content_type=message.content_type,
                content_encoding=message.content_encoding,
                declare=declare,
                retry=True,
                retry_policy=self.app.conf.task_publish_retry_policy,
                **kept,
            )
        message.ack()
        logger.warning(
            "Parked %s[%s] in the holding queue %s: wire version %d, this worker reads up to %d; "
            "a worker of version %d or newer takes it",
            headers.get("task"), headers.get("id"), queue.name, version, self.version, version,
        )  # fmt: skip
        return f"the holding queue {queue.name}"

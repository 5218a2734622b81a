"""Celery's settings, projected from agentloop's :class:`~agentloop.orchestration.settings.Settings`.

The one projection: :func:`celery_config` is what ``create_app`` configures an
app with, and what ``celeryconfig.py`` exposes for ``celery -A ...`` and for
users who configure their own app. The settings already checked that the soft
time limit < the hard one < the visibility timeout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kombu.entity import Exchange, Queue

from agentloop.orchestration.celery_adapter.redis_delivery import OPTION as ATOMIC_DELIVERY
from agentloop.orchestration.celery_adapter.schedule import framework_entries, schedule_from_json
from agentloop.orchestration.settings import Settings
from agentloop.orchestration.settings.broker import Broker

__all__ = [
    "BATCH_PRIORITY",
    "PUBLISH_RETRY_POLICY",
    "BatchRouter",
    "batch_queue_name",
    "celery_config",
    "dead_letter_queue_name",
    "project_broker",
    "queue_config",
]

#: How a message a process sends (a chain's next task, a chord's merge, a canvas, an event) is
#: retried while the broker is away: at once, then every 0.25, 0.5, 0.75 and 1 s, for some 30 s in
#: all. Celery's default gives up after about 1 s, so a stage that finished during a 5 s Redis
#: restart failed its run with ``OperationalError`` (issue 21: 6 of 48 pipeline runs).
PUBLISH_RETRY_POLICY: dict[str, float] = {
    "max_retries": 32,
    "interval_start": 0,
    "interval_step": 0.25,
    "interval_max": 1.0,
}


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings (lowercase names) of ``settings``."""
    return {
        **_broker_and_results(settings),
        # -- serialization: JSON only --------------------------------------------------------------
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        # -- long LLM tasks ------------------------------------------------------------------------
        "task_soft_time_limit": settings.task_soft_time_limit,
        "task_time_limit": settings.task_time_limit,
        "broker_transport_options": _transport_options(settings),
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        # Every task of a run is sent with its launch's priority (a batch's runs' with the batch's,
        # ``priority=`` a launch's): interactive work stays ahead of batches through whole runs.
        "task_inherit_parent_priority": True,
        "worker_prefetch_multiplier": settings.worker_prefetch_multiplier,
        "result_expires": settings.result_expires,
        # Off: the backend would keep every task's arguments (runs' inputs) next to its result,
        # doubling what each task writes to Redis, for nothing the framework reads.
        "result_extended": False,
        # -- visibility in Flower ------------------------------------------------------------------
        "task_track_started": True,
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        # -- routing, time, modules, schedule ------------------------------------------------------
        **queue_config(settings.broker_url, settings.task_default_queue, settings.delivery_limit),
        "timezone": "UTC",
        "enable_utc": True,
        "imports": settings.imports,
        # Batches run by ``celery -A agentloop beat`` (exactly one beat per deployment), and
        # the framework's own sweep of answered questions whose run was never sent on.
        "beat_schedule": {**framework_entries(settings), **schedule_from_json(settings.beat_schedule_json)},
    }


def _broker_and_results(settings: Settings) -> dict[str, Any]:
    return {
        "broker_url": settings.broker_url,
        "result_backend": settings.result_backend,
        "broker_connection_retry_on_startup": True,
        "broker_connection_retry": True,
        "broker_connection_max_retries": settings.broker_connection_max_retries,
        # A result backend that restarts (Redis) is retried, not a lost result: the step that
        # finished while it was away still records its result once it is back.
        "result_backend_always_retry": True,
        "result_backend_max_retries": settings.result_backend_max_retries,
        "task_publish_retry": True,
        "task_publish_retry_policy": PUBLISH_RETRY_POLICY,
        # On a lost broker connection, tasks already running go on: their results and next
        # messages wait for the broker (the retries above). Cancelled instead (Celery 6's
        # default), they would come back only after the visibility timeout (1,260 s by default):
        # a 5 s Redis restart stalled runs for 21 minutes (issue 21). A running task whose
        # acknowledgement is lost with the old connection is delivered again after the visibility
        # timeout, and finds its step ended in the run store: nothing runs twice.
        "worker_cancel_long_running_tasks_on_connection_loss": False,
    }


def batch_queue_name(default_queue: str) -> str:
    """The queue a batch's chunks and launches go to on RabbitMQ: ``<default>.batch``."""
    return f"{default_queue}.batch"


def dead_letter_queue_name(default_queue: str) -> str:
    """Where RabbitMQ puts a message past its delivery limit: ``<default>.dead`` (no worker reads it)."""
    return f"{default_queue}.dead"


#: The priority of a batch's chunks and launches. On Redis a worker takes messages of priority 0
#: (every other message's) before those of 9, so a run launched while a batch of thousands is
#: queued starts at the next free slot instead of behind the batch (bench/fairness.py). RabbitMQ's
#: quorum queues have no priorities: there the priority routes them to the batch queue instead
#: (:class:`BatchRouter`).
BATCH_PRIORITY = 9


@dataclass(frozen=True, slots=True)
class BatchRouter:
    """Celery's ``task_routes`` on RabbitMQ: a message sent with a priority of 5 to 9 (a batch's
    chunks and the launches of its runs: ``batches.BATCH_PRIORITY``, every task of those runs, which
    inherit it, and any launch sent with ``priority`` 5 or more) goes to the batch queue; every
    other to the default one.

    RabbitMQ 3's quorum queues have no priorities: two queues do what the priority does on Redis.
    A worker consumes both, and RabbitMQ hands it the next message of either as soon as a process
    is free, so a run launched beside a queued batch of thousands waits for one free slot, not for
    the batch."""

    queue: str

    def __call__(self, name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **kw: Any) -> Any:
        """``{"queue": ...}`` for a batch message, ``None`` (Celery's default route) for the others."""
        if isinstance(options, dict) and is_batch_class(options.get("priority")):
            return {"queue": self.queue}
        return None


#: The priorities RabbitMQ's two queues put in the batch queue: 5 to 9 (a batch's are 9).
BATCH_CLASS = range(5, 10)


def is_batch_class(priority: Any) -> bool:
    """Whether a message of ``priority`` goes to the batch queue on RabbitMQ (5 to 9)."""
    return type(priority) is int and priority in BATCH_CLASS


def queue_config(broker_url: str, default_queue: str, delivery_limit: int) -> dict[str, Any]:
    """The queues and routes of a broker (Celery's settings).

    Redis and the others: one queue, ``default_queue``, as Celery declares it (a batch's messages
    take their turn by priority: ``batches.BATCH_PRIORITY``). RabbitMQ: ``default_queue`` and its
    batch queue (:func:`batch_queue_name`), both quorum queues (replicated, durable, the type
    RabbitMQ recommends for work queues) with ``x-delivery-limit`` (how often a message may come
    back unacknowledged) and a dead-letter queue past it; bound to a topic exchange of the same
    name, which Celery's native delayed delivery needs for a countdown on a quorum queue (quorum
    queues refuse the global QoS an ETA held in the worker relies on)."""
    if not Broker.of(broker_url).is_amqp:
        return {
            "task_default_queue": default_queue,
            "task_queues": None,
            "task_routes": None,
            "task_default_exchange": None,
            "task_default_exchange_type": "direct",
            "task_default_routing_key": None,
            "task_create_missing_queue_type": "classic",
        }
    exchange = Exchange(default_queue, type="topic", durable=True)  # type: ignore[no-untyped-call]
    arguments = {
        "x-queue-type": "quorum",
        "x-delivery-limit": delivery_limit,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": dead_letter_queue_name(default_queue),
    }
    batch = batch_queue_name(default_queue)
    return {
        "task_default_queue": default_queue,
        "task_queues": [
            Queue(name, exchange, routing_key=name, durable=True, queue_arguments=dict(arguments))  # type: ignore[no-untyped-call]
            for name in (default_queue, batch)
        ],
        "task_routes": [BatchRouter(batch)],
        "task_default_exchange": default_queue,
        "task_default_exchange_type": "topic",
        "task_default_routing_key": default_queue,
        "task_create_missing_queue_type": "quorum",
    }


def _transport_options(settings: Settings) -> dict[str, Any]:
    options: dict[str, Any] = {
        "visibility_timeout": settings.visibility_timeout,
        # One Redis scan per interval (kombu otherwise scans on every tenth 10 s tick).
        "unacked_restore_interval": settings.unacked_restore_seconds,
        "unacked_restore_throttle": 1,
        # The lock of that sweep outlives a worker killed while it held it: for this long, not
        # kombu's 300 s, so a dead worker's messages come back within visibility timeout + twice
        # the interval (docs/deployment.md).
        "unacked_mutex_expire": settings.unacked_restore_seconds,
    }
    return _broker_options(settings.broker_url, options)


def _broker_options(broker_url: str, options: dict[str, Any]) -> dict[str, Any]:
    options = {k: v for k, v in options.items() if k not in ("confirm_publish", "polling_interval")}
    if Broker.of(broker_url).is_amqp:
        # Publisher confirms: a send returns once RabbitMQ has taken the message (a quorum queue:
        # written on a majority of its nodes), so a broker that goes down under a send is retried
        # (PUBLISH_RETRY_POLICY), never a message that silently vanished.
        options["confirm_publish"] = True
    if Broker.of(broker_url).is_redis:
        # A message leaves its queue only into the unacknowledged hash (redis_delivery.py).
        options[ATOMIC_DELIVERY] = True
    else:
        options.pop(ATOMIC_DELIVERY, None)
    if Broker.of(broker_url).in_process:
        # kombu polls its in-memory queues once a second by default: each hop of a chain costs 1 s.
        options["polling_interval"] = 0.01
    return options


def project_broker(conf: Any, delivery_limit: int) -> None:
    """Make ``conf``'s queues, routes and transport options those of its broker and default queue
    as they are now: ``create_app`` calls it after a caller's ``overrides`` changed either."""
    conf.update(queue_config(str(conf.broker_url), str(conf.task_default_queue), delivery_limit))
    conf.broker_transport_options = _broker_options(
        str(conf.broker_url), dict(conf.broker_transport_options or {})
    )

"""Celery's settings, projected from agentloop's :class:`~agentloop.orchestration.settings.Settings`.

The one projection: :func:`celery_config` is what ``create_app`` configures an
app with, and what ``celeryconfig.py`` exposes for ``celery -A ...`` and for
users who configure their own app. The settings already checked that the soft
time limit < the hard one < the visibility timeout.
"""

from __future__ import annotations

from typing import Any

from agentloop.orchestration.celery_adapter.schedule import framework_entries, schedule_from_json
from agentloop.orchestration.settings import Settings

__all__ = ["PUBLISH_RETRY_POLICY", "celery_config"]

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
        "task_default_queue": settings.task_default_queue,
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


def _transport_options(settings: Settings) -> dict[str, float]:
    options: dict[str, float] = {
        "visibility_timeout": settings.visibility_timeout,
        # One Redis scan per interval (kombu otherwise scans on every tenth 10 s tick).
        "unacked_restore_interval": settings.unacked_restore_seconds,
        "unacked_restore_throttle": 1,
    }
    if settings.broker_url.split("://", 1)[0].lower() == "memory":
        # kombu polls its in-memory queues once a second by default: each hop of a chain costs 1 s.
        options["polling_interval"] = 0.01
    return options

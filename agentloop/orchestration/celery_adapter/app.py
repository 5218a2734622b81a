"""The one factory that builds agentloop's Celery app, and what its tasks share in a process.

The core never reaches for ``current_app`` or ``shared_task``: every task is
registered on the app :func:`create_app` returns, and that app does not make
itself Celery's current or default app. ``agentloop.celery`` holds the
deployed instance for ``celery -A agentloop worker|beat|flower``.

An app carries a :class:`~agentloop.orchestration.celery_adapter.dependencies.AppDependencies`: the
settings, the registry of runnables and the run store its tasks use. Nothing of
it is a process global: a test or an embedder passes its own registry and store
to :func:`create_app`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery import Celery

from agentloop.orchestration.celery_adapter.config import celery_config, project_broker
from agentloop.orchestration.celery_adapter.dependencies import AppDependencies
from agentloop.orchestration.celery_adapter.edge_consumer import install_edge
from agentloop.orchestration.celery_adapter.event_loops import install_task_loops
from agentloop.orchestration.celery_adapter.heap import install_heap_freeze
from agentloop.orchestration.celery_adapter.memory_results import use_memory_results
from agentloop.orchestration.celery_adapter.pack_gate import install_pack_gate
from agentloop.orchestration.celery_adapter.pack_policy import install_packing
from agentloop.orchestration.celery_adapter.patches import install_worker_patches
from agentloop.orchestration.celery_adapter.progress_events import ProgressEvents
from agentloop.orchestration.celery_adapter.redis_delivery import install_atomic_delivery
from agentloop.orchestration.celery_adapter.tasks import install_tasks
from agentloop.orchestration.celery_adapter.worker_metrics import install_worker_metrics
from agentloop.orchestration.redaction import redact_url
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.settings import Settings, load_settings
from agentloop.orchestration.store import RunStore

__all__ = ["create_app", "describe_app"]


def create_app(
    *,
    settings: Settings | None = None,
    registry: RunnableRegistry | None = None,
    store: RunStore | None = None,
    config: object | str | None = None,
    overrides: Mapping[str, Any] | None = None,
    main: str = "agentloop",
) -> Celery:
    """Build a Celery app with agentloop's tasks registered.

    Args:
        settings: the deployment's settings (default:
        :func:`~agentloop.orchestration.settings.load_settings`).
        registry: the runnables its tasks may run (default: those the modules in
            ``settings.imports`` declare).
        store: the run store (default: opened on ``settings.database_url`` at first use).
        config: Celery's settings, when not those ``settings`` project
            (:func:`~agentloop.orchestration.celery_adapter.config.celery_config`): a module,
            its dotted name, or any object whose attributes are Celery settings.
        overrides: Celery settings that win over ``config`` (lowercase Celery names),
            e.g. ``{"broker_url": ..., "result_backend": ...}`` in tests.
        main: the app's main name.

    The app is created with ``set_as_current=False`` and is never made the
    default app, so code that falls back on ``current_app`` cannot find it by
    accident.
    """
    settings = settings or load_settings()
    app = Celery(main, set_as_current=False)
    if config is None:
        app.conf.update(celery_config(settings))
    else:
        app.config_from_object(config)
    if overrides:
        app.conf.update(dict(overrides))
        if config is None and _moves_broker(overrides):  # e.g. a test's broker: its queues, not the settings'
            project_broker(app.conf, settings.delivery_limit)
    use_memory_results(app)  # cache+memory:// keeps results for their expiry, not 5,000 of them
    app.agentloop_dependencies = AppDependencies(settings=settings, registry=registry, store=store)
    app.agentloop_progress_events = ProgressEvents(app)  # built here: no two threads race to make it
    install_tasks(app)  # privacy first: before anything builds the app's AMQP
    install_worker_patches(app)
    install_atomic_delivery()  # on Redis: no message lost between its queue and a worker (redis_delivery.py)
    install_edge(app, store=store)  # workers refuse poison messages before Celery touches them
    install_worker_metrics(app)  # a worker serves its metrics with AGENTLOOP_METRICS_PORT (off by default)
    install_heap_freeze(app)  # the boot-time heap out of the collector's walks (heap.py)
    install_task_loops(app)  # tasks run on uvloop's event loop unless AGENTLOOP_EVENT_LOOP=asyncio
    install_packing(app)  # the worker's pool for the packing rule; packs' route (pack_policy.py)
    install_pack_gate(app)  # a prefork worker keeps a spare process beside packs (pack_gate.py)
    if settings.tracing.enabled:  # one trace per run (the otel extra), off by default
        from agentloop.orchestration.tracing.otel import install_tracing

        install_tracing(app, settings.tracing)
    return app


def _moves_broker(overrides: Mapping[str, Any]) -> bool:
    """Whether ``overrides`` change the broker or the default queue, and leave the queues to us."""
    return bool({"broker_url", "task_default_queue"} & set(overrides)) and not (
        {"task_queues", "task_routes", "broker_transport_options"} & set(overrides)
    )


def describe_app(app: Celery) -> dict[str, Any]:
    """The settings worth showing an operator, with every password redacted.

    Reads configuration only; nothing connects to the broker or the backend.
    """
    conf = app.conf
    return {
        "main": app.main,
        "broker": redact_url(str(conf.broker_url)) if conf.broker_url else None,
        "result_backend": redact_url(str(conf.result_backend)) if conf.result_backend else None,
        "default_queue": conf.task_default_queue,
        "imports": list(conf.imports or ()),
        "task_soft_time_limit": conf.task_soft_time_limit,
        "task_time_limit": conf.task_time_limit,
        "visibility_timeout": (conf.broker_transport_options or {}).get("visibility_timeout"),
        "serializers": {
            "task": conf.task_serializer,
            "result": conf.result_serializer,
            "accept": sorted(conf.accept_content or ()),
        },
    }

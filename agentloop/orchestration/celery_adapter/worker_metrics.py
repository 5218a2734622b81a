"""A worker's metrics port (``AGENTLOOP_METRICS_PORT``) and the broker's queue depth.

:class:`WorkerMetrics` is a worker bootstep (Celery's per-app hook, like ``patches.py``'s): when
the app's worker starts with ``AGENTLOOP_METRICS_PORT`` set, its main process counts what it does
(``orchestration/metrics/``) and serves it on that port. A threads or solo pool runs every task
in that process: the one port says everything. A prefork pool runs tasks in its pool processes,
and each counts its own: pool process ``i`` serves on the port plus ``1 + i`` (the index a
replaced process's successor takes over), so Prometheus scrapes ``port`` to ``port +
concurrency``; its counts restart with the process, which Prometheus' ``rate`` and ``increase``
take as counter resets. (One port per process keeps every count where it was made, with no
files shared between processes; a killed process takes what it counted since the last scrape.)

:func:`queue_depths` reads how many messages wait in each of the app's queues (and in its
dead-letter and holding queues, which an operator alerts on), through kombu:
a passive declare, which on Redis is the ``LLEN`` of the queue's lists (one per priority) and on
RabbitMQ the queue's ready messages. ``agentloop serve`` shows it (``web/metrics_route.py``).
"""

from __future__ import annotations

import logging
from contextlib import suppress
from typing import Any

from celery import Celery, bootsteps, signals

from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.celery_adapter.wire_versions import reported_queues
from agentloop.orchestration.settings.metrics import MetricsSettings

__all__ = ["WorkerMetrics", "install_worker_metrics", "queue_depths"]

logger = logging.getLogger(__name__)

#: Seconds a scrape waits for the broker before it leaves the queue depth out.
BROKER_TIMEOUT = 2.0


def _serve(settings: MetricsSettings, port: int, *, fresh: bool = False) -> None:
    from agentloop.orchestration.metrics.exporter import install_metrics

    metrics = install_metrics(fresh=fresh)
    try:
        metrics.serve(settings.host, port)
    except OSError as error:  # a port taken: the worker runs on, without this process's metrics
        logger.warning(
            "metrics: cannot serve on %s:%d (%s); this process's are not scraped", settings.host, port, error
        )
        return
    logger.info("metrics: serving http://%s:%d/metrics", settings.host, port)


class WorkerMetrics(bootsteps.Step):  # type: ignore[misc]
    """A worker bootstep: with ``AGENTLOOP_METRICS_PORT``, serve the worker's metrics (the module doc)."""

    name = "agentloop.metrics"

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        settings = dependencies_of(parent.app).settings.metrics
        if not settings.enabled:
            return
        try:
            from celery.concurrency.prefork import TaskPool as PreforkPool
        except ImportError:  # pragma: no cover - billiard ships with Celery
            PreforkPool = None
        pool = parent.pool_cls
        prefork = PreforkPool is not None and isinstance(pool, type) and issubclass(pool, PreforkPool)
        _serve(settings, settings.port)
        if prefork:  # connected before the pool forks: each pool process then serves its own

            def in_pool_process(**_: Any) -> None:
                from billiard.process import current_process

                index = int(getattr(current_process(), "index", 0) or 0)
                _serve(settings, settings.port + 1 + index, fresh=True)

            signals.worker_process_init.connect(
                in_pool_process, weak=False, dispatch_uid=f"agentloop.metrics.{id(parent)}"
            )


def install_worker_metrics(app: Celery) -> None:
    """Have ``app``'s workers serve their metrics when ``AGENTLOOP_METRICS_PORT`` is set. Idempotent."""
    app.steps["worker"].add(WorkerMetrics)


def queue_depths(app: Celery, *, timeout: float = BROKER_TIMEOUT) -> dict[str, int]:
    """Messages waiting in each of ``app``'s queues: its default one and ``task_queues``, its
    dead-letter queue and its holding queues (``wire_versions.reported_queues``, a bounded set).

    A queue the broker does not know yet holds none. Raises the broker's error when it cannot be
    reached within ``timeout`` seconds: a broker that is away has no depth, not zero.
    """
    names = reported_queues(app)
    options = dict(app.conf.broker_transport_options or {})
    options.update(socket_timeout=timeout, socket_connect_timeout=timeout)
    with app.connection_for_read(connect_timeout=timeout, transport_options=options) as connection:
        connection.ensure_connection(max_retries=1, timeout=timeout)
        depths: dict[str, int] = {}
        for name in names:
            channel = connection.channel()
            try:
                depths[name] = int(channel.queue_declare(queue=name, passive=True).message_count)
            except connection.channel_errors:  # no such queue (yet): nothing waits in it
                depths[name] = 0
            finally:
                with suppress(Exception):  # the broker closed it already (a passive declare's 404)
                    channel.close()
        return depths

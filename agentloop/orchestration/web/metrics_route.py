"""``GET /metrics``: the deployment's metrics in Prometheus' text format, for a token with ``metrics``.

Closed like every route: the caller needs the ``metrics`` scope (a token's, or
``AGENTLOOP_HTTP_ANONYMOUS_SCOPES=metrics`` on a network that only Prometheus reaches). The
counts are of every principal's runs, by runnable: what a business may not show its clients,
so no other scope implies it (a token listing no scope holds them all). Prometheus sends the
token with ``authorization: {credentials: ...}`` in its scrape configuration.

A scrape shows this process's counters (``orchestration/metrics/instruments.py``: the runs its
worker thread ran, when ``agentloop serve --worker``) and the deployment's gauges, read at the
scrape from the broker and the run store (``orchestration/metrics/fleet.py``): the same from
any replica of ``agentloop serve``. The workers' counters are on their own ports
(``AGENTLOOP_METRICS_PORT``). Needs the ``metrics`` extra; without it the route answers 501.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from celery import Celery
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentloop.orchestration.store import RunStore
from agentloop.orchestration.web.auth import METRICS
from agentloop.orchestration.web.refusals import not_installed
from agentloop.orchestration.web.state import caller

if TYPE_CHECKING:
    from agentloop.orchestration.metrics.exporter import PrometheusMetrics

__all__ = ["WebMetrics", "key_states", "metrics_routes"]


def key_states(store: RunStore) -> dict[str, dict[str, int]]:
    """Each concurrency key's runs by state, and its branches (``branches_in_flight``,
    ``branches_waiting``), from the run store's slots (none without them)."""
    slots = getattr(store, "concurrency", None)
    if slots is None:
        return {}
    return {
        key: {"in_flight": c.held, "waiting": c.waiting, "refused": c.refused, "evicted": c.evicted,
              "waits": c.waits, "branches_in_flight": c.branches_held, "branches_waiting": c.branches_waiting}
        for key, c in slots.counts().items()
    }  # fmt: skip


_INSTALL_HINT = "metrics need the metrics extra: pip install 'agentloop[metrics]'"


class WebMetrics:
    """What ``/metrics`` answers for one web app: the process's counters and the app's gauges of
    the deployment (``None`` without the ``metrics`` extra)."""

    def __init__(self, celery_app: Celery, store: RunStore) -> None:
        self._process: PrometheusMetrics | None = None
        self._fleet: PrometheusMetrics | None = None
        try:
            from agentloop.orchestration.celery_adapter.worker_metrics import queue_depths
            from agentloop.orchestration.metrics.exporter import PrometheusMetrics, install_metrics
            from agentloop.orchestration.metrics.fleet import FleetGauges
        except ImportError:
            return
        self._process = install_metrics()
        self._fleet = PrometheusMetrics()
        FleetGauges(
            self._fleet.meter,
            queue_depths=lambda: queue_depths(celery_app),
            run_counts=store.count_open_runs,
            key_counts=lambda: key_states(store),
        )

    @property
    def installed(self) -> bool:
        return self._fleet is not None

    def scrape(self) -> bytes:
        """The process's counters, then the deployment's gauges (read now), as one scrape."""
        if self._process is None or self._fleet is None:
            return b""
        return self._process.scrape() + self._fleet.scrape()

    def close(self) -> None:
        """Let the app's gauges go (the process's counters stay: other apps may count with them)."""
        fleet, self._fleet = self._fleet, None
        if fleet is not None:
            fleet.close()


async def scrape(request: Request) -> Response:
    caller(request).require(METRICS)
    metrics: Any = request.app.state.metrics
    if not isinstance(metrics, WebMetrics) or not metrics.installed:
        raise not_installed(_INSTALL_HINT)
    from agentloop.orchestration.metrics.exporter import CONTENT_TYPE

    body = await run_in_threadpool(metrics.scrape)  # the broker and the database answer in a thread
    return Response(body, media_type=CONTENT_TYPE)


def metrics_routes() -> list[Route]:
    """``GET /metrics``."""
    return [Route("/metrics", scrape, methods=["GET"])]

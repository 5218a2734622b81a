"""``create_web_app``: the ASGI application of ``agentloop serve``, beside a Celery app.

It holds no state of its own beyond one process: runs are started through the
Celery app (``agentloop.launch``), read from the run store the app's tasks
write, and followed through one :class:`~agentloop.orchestration.web.progress.ProgressHub`.
Routes: ``rest.py`` and ``sse.py`` (plain HTTP), ``/graphql``
(``graphql_view.py``, ``schema.py``), ``/ui`` (``ui.py``), ``/metrics`` (``metrics_route.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from celery import Celery
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute

from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.settings import Settings
from agentloop.orchestration.store import RunStore
from agentloop.orchestration.web.auth import Authenticator
from agentloop.orchestration.web.graphql_view import GraphQLEndpoint
from agentloop.orchestration.web.metrics_route import WebMetrics, metrics_routes
from agentloop.orchestration.web.progress import ProgressHub
from agentloop.orchestration.web.refusals import error_response
from agentloop.orchestration.web.request_limits import BodyLimit, StreamSlots
from agentloop.orchestration.web.rest import rest_routes
from agentloop.orchestration.web.resume import resume_routes
from agentloop.orchestration.web.schema import build_schema
from agentloop.orchestration.web.service import RunService
from agentloop.orchestration.web.sse import sse_routes
from agentloop.orchestration.web.state import WebState
from agentloop.orchestration.web.ui import ui_routes

__all__ = ["create_web_app"]


async def _refused(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    return error_response(error)


def create_web_app(
    *,
    celery_app: Celery,
    settings: Settings | None = None,
    registry: RunnableRegistry | None = None,
    store: RunStore | None = None,
    keepalive_seconds: float = 15.0,
) -> Starlette:
    """The web app for ``celery_app`` (built by
    :func:`~agentloop.orchestration.celery_adapter.app.create_app`).

    ``settings`` (default: the Celery app's) give the tokens, scopes and limits
    (``settings.http``); ``registry`` and ``store`` default to the Celery app's,
    so the names a client may start are the ones its workers run.
    """
    deps = dependencies_of(celery_app)
    settings = settings or deps.settings
    http = settings.http
    store = store if store is not None else deps.store
    hub = ProgressHub(store, poll_seconds=http.poll_seconds)
    service = RunService(
        celery_app=celery_app,
        store=store,
        registry=registry if registry is not None else deps.registry,
        hub=hub,
        slots=StreamSlots(http.max_streams),
    )
    state = WebState(service=service, auth=Authenticator(http), keepalive_seconds=keepalive_seconds)
    graphql = GraphQLEndpoint(build_schema(), state=state, allowed_origins=http.cors_origins)
    middleware = [Middleware(BodyLimit, max_bytes=http.max_body_bytes)]
    if http.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(http.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
            )
        )

    metrics = WebMetrics(celery_app, store)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        yield {}
        await hub.close()
        metrics.close()

    app = Starlette(
        routes=[
            *rest_routes(),
            *resume_routes(),
            *sse_routes(),
            Route("/graphql", graphql, methods=["POST"]),
            WebSocketRoute("/graphql", graphql),
            *ui_routes(),
            *metrics_routes(),
        ],
        middleware=middleware,
        exception_handlers={HTTPException: _refused},
        lifespan=lifespan,
    )
    app.state.web = state
    app.state.metrics = metrics
    return app

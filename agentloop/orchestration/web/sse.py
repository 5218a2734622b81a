"""``GET /runs/{id}/events``: a run's progress as Server-Sent Events, resumable with ``Last-Event-ID``.

::

    retry: 2000

    id: 41                       <- the event's id in the run store
    event: progress
    data: {"id": 41, "path": "pipeline/0/branch/q1", "status": "progress", ...}

    : keepalive                  <- every 15 s without news

    event: end
    data: {"id": "<run id>", "status": "succeeded", "usage": {...}, ...}

A client that reconnects sends the last id it saw as ``Last-Event-ID`` (an
``EventSource`` does so by itself) and gets every event after it, then the
live ones. ``?after=ID`` does the same for a first connection. Reconnecting to
a run that has ended, with nothing after ``Last-Event-ID``, answers 204, which
tells an ``EventSource`` to stop. The events come from the one
:class:`~agentloop.orchestration.web.progress.ProgressHub` of the process.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from agentloop.orchestration.web.refusals import invalid_input
from agentloop.orchestration.web.request_limits import HeldStream
from agentloop.orchestration.web.state import caller, web_state

__all__ = ["format_event", "sse_routes"]

_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def format_event(kind: str, view: dict[str, Any]) -> str:
    """One SSE frame: ``id`` (progress only), ``event`` and one ``data`` line of JSON."""
    if kind == "idle":
        return ": keepalive\n\n"
    event_id = f"id: {view['id']}\n" if kind == "progress" else ""
    return f"{event_id}event: {kind}\ndata: {json.dumps(view, separators=(',', ':'))}\n\n"


def _after_id(request: Request) -> tuple[int, bool]:
    """Where the stream starts, and whether the client is resuming (``Last-Event-ID``)."""
    resumed = request.headers.get("last-event-id")
    value = resumed if resumed is not None else request.query_params.get("after", "0")
    value = value.strip()
    if not value.isdigit() or len(value) > 18:
        raise invalid_input("Last-Event-ID (or ?after=) must be an event id")
    return int(value), resumed is not None


async def _frames(stream: HeldStream[tuple[str, dict[str, Any]]]) -> AsyncIterator[str]:
    yield "retry: 2000\n\n"
    async with aclosing(stream) as items:
        async for kind, view in items:
            yield format_event(kind, view)


async def run_events(request: Request) -> Response:
    principal = caller(request)
    state = web_state(request)
    run_id = request.path_params["run_id"]
    after_id, resumed = _after_id(request)
    if resumed and await state.service.ended_without_news(principal, run_id, after_id):
        return Response(status_code=204)
    stream = await state.service.stream(
        principal, run_id, after_id=after_id, idle_seconds=state.keepalive_seconds
    )
    return _EventStream(stream)


class _EventStream(StreamingResponse):
    """The stream's frames; its slot goes back when the response is over, also when it never
    started (the client left before the first frame)."""

    def __init__(self, stream: HeldStream[tuple[str, dict[str, Any]]]) -> None:
        super().__init__(_frames(stream), media_type="text/event-stream", headers=_HEADERS)
        self._stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._stream.aclose()


def sse_routes() -> list[Route]:
    return [Route("/runs/{run_id:str}/events", run_events, methods=["GET"])]

"""Event streams past ``AGENTLOOP_HTTP_MAX_STREAMS``, asked for all at once from a real uvicorn:
each gets 200 and its stream, or 503 with ``Retry-After`` before anything is streamed, never a 200
whose stream is then aborted; every slot is given back when the streams close."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
from sse_client import frames
from web_support import WebRig, auth, live_server, wait_for

SLOTS = 3
CLIENTS = 12


async def ask(client: httpx.AsyncClient, run_id: str, opened: asyncio.Event) -> tuple[int, str | None, str]:
    """The status, ``Retry-After`` and the first frame's event (or the error code) of one stream."""
    async with client.stream("GET", f"/runs/{run_id}/events", headers=auth("read")) as response:
        if response.status_code != 200:
            body = await response.aread()
            return (
                response.status_code,
                response.headers.get("retry-after"),
                httpx.Response(200, content=body).json()["error"]["code"],
            )
        # the reader is kept until the end: one dropped after its first frame is finalized by the
        # event loop, and closing it closes the connection, which gives the slot back too soon
        reader = frames(response)
        first = await anext(reader)
        await opened.wait()  # hold the slot until every client has its answer
        await reader.aclose()
        return 200, None, first.event


async def test_streams_past_the_limit_get_503_before_anything_is_streamed(
    web_rig: WebRig, caplog: pytest.LogCaptureFixture
) -> None:
    app = web_rig.web(max_streams=SLOTS)
    slots = app.state.web.service.slots
    gate = web_rig.gate()
    caplog.set_level(logging.ERROR)
    with live_server(app) as base:
        limits = httpx.Limits(max_connections=CLIENTS + 5, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
            started = await client.post(
                "/runs",
                json={"runnable": "web.gated", "input": {"gate": str(gate), "keys": ["a"]}},
                headers=auth("all"),
            )
            run_id = started.json()["id"]
            wait_for(lambda: web_rig.store.events(run_id), what="the run's first event")
            opened = asyncio.Event()
            asked = [asyncio.create_task(ask(client, run_id, opened)) for _ in range(CLIENTS)]
            answered: set[asyncio.Task[tuple[int, str | None, str]]] = set()
            while len(answered) < CLIENTS - SLOTS:  # every refusal, while the streams hold their slots
                pending = [task for task in asked if task not in answered]
                done, _ = await asyncio.wait(pending, timeout=60, return_when=asyncio.FIRST_COMPLETED)
                assert done, f"no answer in 60 s; {len(answered)} answered, {slots.open} slots held"
                answered |= done
            assert slots.open == SLOTS
            opened.set()
            answers = await asyncio.wait_for(asyncio.gather(*asked), 60)
        gate.touch()
        wait_for(lambda: slots.open == 0, what="every slot given back")

    assert sorted(answers) == sorted(
        [(200, None, "progress")] * SLOTS + [(503, "1", "UNAVAILABLE")] * (CLIENTS - SLOTS)
    )
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]

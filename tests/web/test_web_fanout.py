"""500 SSE clients following one run cost the run store one poller's reads, not 500.

A real uvicorn on 127.0.0.1 and 500 concurrent httpx streams, bounded in time.
The web app reads through a store that counts its calls: while the clients
wait, the store is read twice per poll interval (status, then new events),
whatever the number of clients; each client costs one read when it connects.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

import httpx
from sse_client import Frame, frames
from web_support import WebRig, auth, live_server, wait_for

from agentloop.orchestration.store import RunStore

CLIENTS = 500
POLL_SECONDS = 0.1


class CountingStore:
    """The run store, with a count of the reads the web app makes."""

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self.reads: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if name not in ("get_run", "events", "list_runs") or not callable(attribute):
            return attribute

        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.reads[name] += 1
            return attribute(*args, **kwargs)

        return counted

    def total(self) -> int:
        with self._lock:
            return sum(self.reads.values())


async def follow(
    client: httpx.AsyncClient, run_id: str, connected: asyncio.Event, count: list[int]
) -> list[Frame]:
    got: list[Frame] = []
    async with client.stream("GET", f"/runs/{run_id}/events", headers=auth("read")) as response:
        assert response.status_code == 200
        async for frame in frames(response):
            got.append(frame)
            if len(got) == 1:
                count[0] += 1
                if count[0] == CLIENTS:
                    connected.set()
            if frame.event == "end":
                break
    return got


async def test_500_clients_of_one_run_cost_the_store_one_poller(web_rig: WebRig) -> None:
    counting = CountingStore(web_rig.store)
    app = web_rig.web(store=counting, poll_seconds=POLL_SECONDS, max_streams=CLIENTS + 10)  # type: ignore[arg-type]
    gate = web_rig.gate()
    with live_server(app) as base:
        limits = httpx.Limits(max_connections=CLIENTS + 10, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
            started = await client.post(
                "/runs",
                json={"runnable": "web.gated", "input": {"gate": str(gate), "keys": ["a", "b"]}},
                headers=auth("all"),
            )
            run_id = started.json()["id"]
            wait_for(lambda: len(web_rig.store.events(run_id)) >= 3, what="the run's first events")
            connected, count = asyncio.Event(), [0]
            clients = [asyncio.create_task(follow(client, run_id, connected, count)) for _ in range(CLIENTS)]
            await asyncio.wait_for(connected.wait(), 60)
            await asyncio.sleep(2 * POLL_SECONDS)  # the last clients' first polls are over

            before, window_start = counting.total(), time.monotonic()
            await asyncio.sleep(1.0)
            steady_reads, window = counting.total() - before, time.monotonic() - window_start
            polls = app.state.web.service.hub.feeds

            gate.touch()
            results = await asyncio.wait_for(asyncio.gather(*clients), 120)

    expected = [event_id for event_id, _ in web_rig.store.events(run_id)]
    for got in results:
        assert [int(f.id) for f in got if f.event == "progress"] == expected
        assert got[-1].event == "end" and got[-1].data["status"] == "succeeded"
    intervals = window / POLL_SECONDS
    print(
        f"\n{CLIENTS} clients: {steady_reads} store reads in {window:.2f} s ({intervals:.0f} polls), "
        f"{polls} feed(s); reads by kind over the test: {dict(counting.reads)}"
    )
    assert polls == 1
    assert steady_reads <= 2 * (intervals + 2), "the store is read per client, not per poll interval"
    assert steady_reads >= 2  # it was polled at all

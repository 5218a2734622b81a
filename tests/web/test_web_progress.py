"""The progress hub: one feed per run, a tail for late joiners, lagging followers catch up, nothing
lost or repeated, and every follower ends with the run's end."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.web import progress
from agentloop.orchestration.web.progress import EventItem, ProgressHub, RunEnded


def event(n: int) -> dict[str, Any]:
    return {
        "run_id": "r",
        "path": "",
        "runnable": "x",
        "iteration": n,
        "max_iterations": 99,
        "phase": "step",
        "status": "progress",
        "message": f"step {n}",
        "data": {},
        "at": 0.0,
    }


def a_run(events: int = 0) -> InMemoryRunStore:
    store = InMemoryRunStore()
    store.create_run(run_id="r", runnable="x", input=None)
    store.mark_running("r")
    if events:
        store.append_events("r", [event(n) for n in range(events)])
    return store


async def drain(hub: ProgressHub, after_id: int = 0, *, pause: float = 0.0) -> list[Any]:
    items = []
    async for item in hub.follow("r", after_id=after_id):
        items.append(item)
        if pause:
            await asyncio.sleep(pause)
    return items


def ids(items: list[Any]) -> list[int]:
    return [item.id for item in items if isinstance(item, EventItem)]


async def test_followers_get_every_event_then_the_end_and_share_one_feed() -> None:
    store = a_run(3)
    hub = ProgressHub(store, poll_seconds=0.01)
    followers = [asyncio.create_task(drain(hub)) for _ in range(5)]
    await asyncio.sleep(0.05)
    assert hub.feeds == 1
    store.append_events("r", [event(3), event(4)])
    await asyncio.sleep(0.05)
    store.finish_run("r", status="succeeded", output=1)
    results = await asyncio.wait_for(asyncio.gather(*followers), 5)

    expected = [event_id for event_id, _ in store.events("r")]
    for items in results:
        assert ids(items) == expected and len(expected) == 5
        assert isinstance(items[-1], RunEnded) and items[-1].record.status == "succeeded"
    assert hub.feeds == 0  # the feed left with its last follower


async def test_resuming_after_an_id_skips_what_was_seen_and_a_late_joiner_reads_the_tail() -> None:
    store = a_run(6)
    store.finish_run("r", status="failed", error={"type": "E", "message": "m"})
    hub = ProgressHub(store, poll_seconds=0.01)
    all_ids = [event_id for event_id, _ in store.events("r")]

    resumed = await asyncio.wait_for(drain(hub, after_id=all_ids[3]), 5)

    assert ids(resumed) == all_ids[4:]
    assert isinstance(resumed[-1], RunEnded) and resumed[-1].record.status == "failed"


async def test_a_follower_older_than_the_tail_catches_up_from_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(progress, "TAIL", 3)
    store = a_run(10)
    hub = ProgressHub(store, poll_seconds=0.01)
    first = asyncio.create_task(drain(hub, after_id=0))
    await asyncio.sleep(0.05)  # the feed holds only the last 3 events now
    late = asyncio.create_task(drain(hub, after_id=0))
    await asyncio.sleep(0.05)
    store.append_events("r", [event(10)])
    await asyncio.sleep(0.05)
    store.finish_run("r", status="succeeded", output=None)
    early_items, late_items = await asyncio.wait_for(asyncio.gather(first, late), 5)

    expected = [event_id for event_id, _ in store.events("r")]
    assert ids(early_items) == expected and ids(late_items) == expected


async def test_a_slow_follower_lags_and_catches_up_without_loss_or_repeats(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(progress, "QUEUE", 2)
    store = a_run(0)
    hub = ProgressHub(store, poll_seconds=0.01)
    slow = asyncio.create_task(drain(hub, pause=0.02))
    fast = asyncio.create_task(drain(hub))
    for batch in range(5):
        store.append_events("r", [event(10 * batch + n) for n in range(4)])
        await asyncio.sleep(0.02)
    store.finish_run("r", status="succeeded", output=None)
    slow_items, fast_items = await asyncio.wait_for(asyncio.gather(slow, fast), 10)

    expected = [event_id for event_id, _ in store.events("r")]
    assert len(expected) == 20
    assert ids(slow_items) == expected and ids(fast_items) == expected
    assert isinstance(slow_items[-1], RunEnded) and isinstance(fast_items[-1], RunEnded)


async def test_an_idle_follower_is_told_so_and_closing_the_hub_stops_every_feed() -> None:
    hub = ProgressHub(a_run(0), poll_seconds=0.01)
    stream = hub.follow("r", idle_seconds=0.05)
    first = await asyncio.wait_for(anext(stream), 2)
    await stream.aclose()
    await hub.close()

    assert isinstance(first, progress.Idle)
    assert hub.feeds == 0

"""Run progress for every client of this process, read once from where it is written: the run store.

Workers write a run's events to the run store (``store/seams.py``:
``ProgressPublisher`` writes them at most every second, or with the task's result). The :class:`ProgressHub`
keeps one *feed* per followed run: one task that reads the run's status and
its new events every ``AGENTLOOP_HTTP_POLL_SECONDS`` and hands them to every
follower's queue. 500 clients following one run cost the store two reads per
interval, the same as one client, and the workers nothing: they are never asked.

Why the store and not Redis pub/sub: the store is where every deployment
writes progress already (SQLite on the embedded defaults, PostgreSQL in
production), its event ids order a run's events and make ``Last-Event-ID``
resumption exact, and no worker has to publish twice. A message that pub/sub
lost while a client reconnected would be lost for good; here it is re-read.

A feed keeps the last :data:`TAIL` events in memory, so a client joining late
(or resuming) gets what it missed without a read of its own. One that asks
for older events, or reads slower than its queue of :data:`QUEUE` events fills,
*lags*: it catches up from the store by itself (its own reads, bounded by how
far behind it is), then rejoins the feed. Every follower ends with
:class:`RunEnded` once the run has ended and its last events are out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from agentloop.orchestration.store import RunRecord, RunStore

__all__ = ["PAGE", "QUEUE", "TAIL", "EventItem", "Idle", "ProgressHub", "RunEnded"]

logger = logging.getLogger(__name__)

#: Events read at most per store call; events kept per feed; events queued at most per follower.
PAGE, TAIL, QUEUE = 1000, 2000, 1000


@dataclass(frozen=True, slots=True)
class EventItem:
    """One progress event of the run and its id in the store (the SSE event id)."""

    id: int
    event: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RunEnded:
    """The run has ended: its record, with the final status."""

    record: RunRecord


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing new for a while (a stream sends a keep-alive)."""


Item = EventItem | RunEnded | Idle


@dataclass(eq=False)
class _Follower:
    last_id: int
    lagging: bool = False
    queue: asyncio.Queue[Item] = field(default_factory=lambda: asyncio.Queue(QUEUE))


class _Feed:
    """One followed run: the last events read, the followers, the task that reads."""

    def __init__(self, run_id: str, after_id: int) -> None:
        self.run_id = run_id
        self.cursor = self.floor = after_id  # the last id read; the tail holds every id above floor
        self.tail: deque[tuple[int, dict[str, Any]]] = deque()
        self.followers: set[_Follower] = set()
        self.ended: RunRecord | None = None
        self.task: asyncio.Task[None] | None = None

    def read(self, store: RunStore) -> tuple[RunRecord | None, list[tuple[int, dict[str, Any]]]]:
        """The run's record, then every event after the cursor (status first: an ended run's events
        are all written by then)."""
        record = store.get_run(self.run_id)
        rows: list[tuple[int, dict[str, Any]]] = []
        while True:
            page = store.events(self.run_id, after_id=rows[-1][0] if rows else self.cursor, limit=PAGE)
            rows.extend(page)
            if len(page) < PAGE:
                return record, rows

    def hand_out(self, record: RunRecord | None, rows: list[tuple[int, dict[str, Any]]]) -> None:
        """Keep ``rows`` in the tail and give them to every follower that keeps up."""
        for event_id, event in rows:
            if event_id <= self.cursor:
                continue
            if len(self.tail) >= TAIL:
                self.floor = self.tail.popleft()[0]
            self.tail.append((event_id, event))
            self.cursor = event_id
            self._give(EventItem(event_id, event))
        if record is not None and record.is_finished:
            self.ended = record
            self._give(RunEnded(record))

    def _give(self, item: Item) -> None:
        for follower in self.followers:
            if follower.lagging:
                continue
            try:
                follower.queue.put_nowait(item)
            except asyncio.QueueFull:
                follower.lagging = True  # it catches up from the store on its own


class ProgressHub:
    """One feed per followed run in this process, fanned out to every follower."""

    def __init__(self, store: RunStore, *, poll_seconds: float) -> None:
        self.store, self.poll_seconds = store, poll_seconds
        self._feeds: dict[str, _Feed] = {}

    @property
    def feeds(self) -> int:
        """How many runs are followed now."""
        return len(self._feeds)

    async def follow(
        self, run_id: str, *, after_id: int = 0, idle_seconds: float | None = None
    ) -> AsyncGenerator[Item, None]:
        """The run's events after ``after_id`` as they are written, then :class:`RunEnded`;
        :class:`Idle` after ``idle_seconds`` without news."""
        feed = self._feeds.get(run_id)
        if feed is None:
            feed = self._feeds[run_id] = _Feed(run_id, after_id)
            feed.task = asyncio.create_task(self._poll(feed), name=f"agentloop-progress-{run_id}")
        follower = _Follower(last_id=after_id, lagging=after_id < feed.floor)
        backlog = [] if follower.lagging else [row for row in feed.tail if row[0] > after_id]
        ended = None if follower.lagging else feed.ended  # the tail and the end are all it needs
        feed.followers.add(follower)
        try:
            for event_id, event in backlog:
                follower.last_id = event_id
                yield EventItem(event_id, event)
            if ended is not None:
                yield RunEnded(ended)
                return
            async for item in self._items(feed, follower, idle_seconds):
                yield item
        finally:
            self._leave(feed, follower)

    async def _items(
        self, feed: _Feed, follower: _Follower, idle_seconds: float | None
    ) -> AsyncGenerator[Item, None]:
        while True:
            if follower.lagging:
                rows = await asyncio.to_thread(
                    self.store.events, feed.run_id, after_id=follower.last_id, limit=PAGE
                )
                for event_id, event in rows:
                    follower.last_id = event_id
                    yield EventItem(event_id, event)
                if len(rows) < PAGE and follower.last_id >= feed.cursor:
                    follower.lagging = False  # from here on the feed hands it every new event
                continue
            if feed.ended is not None and follower.queue.empty():
                yield RunEnded(feed.ended)  # it lagged when the run ended, and has caught up since
                return
            try:
                item = await asyncio.wait_for(follower.queue.get(), idle_seconds)
            except TimeoutError:
                yield Idle()
                continue
            if isinstance(item, RunEnded):
                yield item
                return
            if isinstance(item, EventItem) and item.id > follower.last_id:
                follower.last_id = item.id
                yield item

    def _leave(self, feed: _Feed, follower: _Follower) -> None:
        feed.followers.discard(follower)
        if not feed.followers and self._feeds.get(feed.run_id) is feed:
            del self._feeds[feed.run_id]
            if feed.task is not None:
                feed.task.cancel()

    async def _poll(self, feed: _Feed) -> None:
        while feed.ended is None:
            try:
                record, rows = await asyncio.to_thread(feed.read, self.store)
            except Exception:  # the store is down: followers wait, the next poll tries again
                logger.warning("reading the progress of run %s failed", feed.run_id, exc_info=True)
            else:
                feed.hand_out(record, rows)
            if feed.ended is None:
                await asyncio.sleep(self.poll_seconds)

    async def close(self) -> None:
        """Stop every feed (the server is shutting down)."""
        feeds, self._feeds = list(self._feeds.values()), {}
        for feed in feeds:
            if feed.task is not None:
                feed.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await feed.task

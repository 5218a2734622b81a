"""``PackWrites``: the run-store writes of the loops one task runs together, gathered.

A pack (``agentloop.pack``, ``docs/how-to/packing.md``) runs many loops of one run on one event
loop. Each would write its checkpoints and its result with a call of its own, each call a
database round trip during which the event loop, and so every other loop of the pack, waits.
Instead each loop hands its write here and awaits it: the writes that fall due while the event
loop runs one round are written together when that round ends, one statement for the
checkpoints with the progress events the pack emitted before them
(:meth:`~agentloop.orchestration.store.RunStore.save_checkpoints`: a process killed after a
checkpoint has stored every event up to it, and a resumption emits the later ones again, and the
usage of the model calls before them, not written yet: a checkpoint never stands without it) and one
transaction for the results with their events and usage
(:meth:`~agentloop.orchestration.store.RunStore.finish_loops`). A loop goes on only once its own
write is recorded, so it is as durable as writing alone; a failed write fails each loop that
waited on it, with the store's error.

Given an ``offload`` (a pack's threads, ``orchestration/packing/threads.py``), each write's round
trip runs in a thread while the event loop runs the pack's other loops (their model calls go on
while the database answers; a slow database no longer holds the loop); the writes still go one
at a time, in the order they fell due, and :meth:`PackWrites.drain` waits for the last.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentloop.actions.usage import Usage
from agentloop.orchestration.store.json_values import JsonValue
from agentloop.orchestration.store.protocol import RunStore

__all__ = ["EventBuffer", "PackWrites", "UsageBuffer"]

logger = logging.getLogger(__name__)


class EventBuffer(Protocol):
    """Where a pack's progress events wait to be written (the task's publisher)."""

    def take_events(self) -> list[dict[str, Any]]:
        """The events not written yet, which leave the buffer."""
        ...

    def give_back(self, events: list[dict[str, Any]]) -> None:
        """Put events taken but not written back at the buffer's head."""
        ...


class UsageBuffer(Protocol):
    """Where a pack's token usage waits to be written (the pack's ``StoreUsageMeter``)."""

    def take(self) -> Usage:
        """The usage not written yet, which leaves the buffer."""
        ...

    def keep(self, usage: Usage) -> None:
        """Put usage taken but not written back in the buffer."""
        ...


@dataclass(frozen=True, slots=True)
class _Checkpoint:
    path: str
    iteration: int
    state: JsonValue
    done: asyncio.Future[None]


@dataclass(frozen=True, slots=True)
class _Result:
    path: str
    result: JsonValue
    events: Sequence[Mapping[str, Any]]
    input_tokens: int
    output_tokens: int
    done: asyncio.Future[JsonValue]


class PackWrites:
    """The checkpoints and results of run ``run_id``'s packed loops, written together (see the
    module doc). Used from one event loop."""

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        *,
        events: EventBuffer | None = None,
        usage: UsageBuffer | None = None,
        offload: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None,
    ) -> None:
        self.store, self.run_id, self.events, self.offload = store, run_id, events, offload
        self.usage = usage
        self._checkpoints: list[_Checkpoint] = []
        self._results: list[_Result] = []
        self._due = False
        self._events_due = False  # the buffer's events are due on their own (its interval passed)
        self._writing: asyncio.Future[None] | None = None  # the last write handed to ``offload``
        #: How many writes of each kind went out, and in how many store calls (for the bench).
        self.writes = self.calls = 0

    def checkpoint(self, path: str, iteration: int, state: JsonValue) -> asyncio.Future[None]:
        """Save the loop at ``path``'s checkpoint with the others due; done once recorded."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._checkpoints.append(_Checkpoint(path, iteration, state, done))
        self._schedule()
        return done

    def finish(
        self,
        path: str,
        result: JsonValue,
        *,
        events: Sequence[Mapping[str, Any]] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> asyncio.Future[JsonValue]:
        """Record the loop at ``path``'s result (with ``events`` and its usage) with the others due;
        done with the result as recorded (a first result stands)."""
        done: asyncio.Future[JsonValue] = asyncio.get_running_loop().create_future()
        self._results.append(_Result(path, result, events, input_tokens, output_tokens, done))
        self._schedule()
        return done

    def events_due(self) -> None:
        """The buffered progress events (``events``) are due: written with the writes due, in
        turn (with a checkpoint's, else on their own), not on the caller's thread."""
        self._events_due = True
        self._schedule()

    def _schedule(self) -> None:
        if not self._due:
            self._due = True
            asyncio.get_running_loop().call_soon(self._write)

    def _write(self) -> None:
        self._due = False
        checkpoints, self._checkpoints = self._checkpoints, []
        results, self._results = self._results, []
        events_only, self._events_due = self._events_due and not checkpoints, False  # a checkpoint takes them
        self.writes += len(checkpoints) + len(results)
        self.calls += bool(checkpoints) + bool(results) + events_only
        if self.offload is not None:  # in a thread, after the write before it
            previous = self._writing
            self._writing = asyncio.ensure_future(
                self._write_off_loop(previous, checkpoints, results, events_only)
            )
            return
        if events_only:
            self._append_events(None)
        if checkpoints:
            rows = [(c.path, c.iteration, c.state) for c in checkpoints]
            _settle([c.done for c in checkpoints], lambda: self._save(rows))
        if results:
            _settle([r.done for r in results], lambda: self._finish(results))

    async def _write_off_loop(
        self,
        previous: asyncio.Future[None] | None,
        checkpoints: list[_Checkpoint],
        results: list[_Result],
        events_only: bool = False,
    ) -> None:
        assert self.offload is not None
        if previous is not None:
            await asyncio.wait([previous])  # one write at a time, in the order they fell due
        if events_only and self.events is not None:
            events = self.events.take_events()  # on the loop, in turn
            if events:
                try:
                    await self.offload(functools.partial(self._append_events, events))
                except Exception as error:
                    self._events_lost(events, error)
        if checkpoints:
            rows = [(c.path, c.iteration, c.state) for c in checkpoints]
            events, used = self._take()  # on the loop
            try:
                await self.offload(functools.partial(self._save, rows, (events, used)))
            except BaseException as error:
                self._give_back(events, used)  # kept for the next write: never lost
                _fail([c.done for c in checkpoints], error)
            else:
                _settle([c.done for c in checkpoints], lambda: None)
        if results:
            try:
                values = await self.offload(functools.partial(self._finish, results))
            except BaseException as error:
                _fail([r.done for r in results], error)
            else:
                _settle([r.done for r in results], lambda: values)

    async def drain(self) -> None:
        """Wait for the writes handed to ``offload`` (none without one) to end."""
        if self._writing is not None:
            await asyncio.wait([self._writing])

    def _take(self) -> tuple[list[dict[str, Any]], Usage]:
        """The buffered events and usage, which go with the checkpoints due."""
        events = self.events.take_events() if self.events is not None else []
        return events, self.usage.take() if self.usage is not None else Usage()

    def _give_back(self, events: list[dict[str, Any]], used: Usage) -> None:
        if events and self.events is not None:
            self.events.give_back(events)
        if self.usage is not None:
            self.usage.keep(used)

    def _save(
        self,
        rows: list[tuple[str, int, JsonValue]],
        taken: tuple[list[dict[str, Any]], Usage] | None = None,
    ) -> None:
        on_loop = taken is None  # on the loop: this call takes the buffered events and usage itself
        events, used = self._take() if taken is None else taken
        try:
            self.store.save_checkpoints(
                self.run_id,
                rows,
                events=events,
                input_tokens=used.input_tokens,
                output_tokens=used.output_tokens,
            )
        except BaseException:
            if on_loop:  # kept for the next write: never lost here
                self._give_back(events, used)
            raise

    def _append_events(self, events: list[dict[str, Any]] | None) -> None:
        """Write the buffered events on their own (``None``: take them here, on the loop)."""
        if events is None:
            events = self.events.take_events() if self.events is not None else []
            try:
                self._append_events(events)
            except Exception as error:
                self._events_lost(events, error)
            return
        if events:
            self.store.append_events(self.run_id, events)

    def _events_lost(self, events: list[dict[str, Any]], error: BaseException) -> None:
        """A write of events alone failed (on the loop): they go back to the buffer, first in the
        next write (a checkpoint's, or the pack's last); logged, never raised, as the publisher's
        own writes."""
        logger.warning(
            "could not record %d progress event(s) of run %s yet: %s", len(events), self.run_id, error
        )
        if self.events is not None:
            self.events.give_back(events)

    def _finish(self, results: list[_Result]) -> list[JsonValue]:
        return self.store.finish_loops(
            self.run_id,
            [(r.path, r.result) for r in results],
            events=[event for r in results for event in r.events],
            input_tokens=sum(r.input_tokens for r in results),
            output_tokens=sum(r.output_tokens for r in results),
        )


def _fail(waiting: list[asyncio.Future[Any]], error: BaseException) -> None:
    """Hand each waiting loop ``error``: a write in a thread failed (a cancellation: the loops that
    waited on it were cancelled with their pack, and are told so)."""
    for done in waiting:
        if not done.done():
            if isinstance(error, asyncio.CancelledError):
                done.cancel()
            else:
                done.set_exception(error)


def _settle(waiting: list[asyncio.Future[Any]], write: Any) -> None:
    """Run ``write`` and hand each waiting loop its value (one per loop, or ``None`` for all), or
    the error it raised (the soft time limit too: each loop raises it in turn)."""
    try:
        values = write()
    except Exception as error:
        for done in waiting:
            if not done.done():
                done.set_exception(error)
        return
    for index, done in enumerate(waiting):
        if not done.done():
            done.set_result(None if values is None else values[index])

"""A task's progress publisher: one write for a fast task, progress visible within the
interval for a slow one, no PROGRESS state published at the task's end, and failures of
the store never failing the run."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

from agentloop.loops import ProgressEvent, ProgressStatus
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.store.seams import ProgressPublisher


class CountingStore(InMemoryRunStore):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def append_events(self, root_run_id: str, events: Any) -> None:
        self.writes += 1
        super().append_events(root_run_id, events)


def progress(n: int, status: ProgressStatus = ProgressStatus.PROGRESS) -> ProgressEvent:
    return ProgressEvent(
        run_id="r", path="", runnable="L", iteration=n, max_iterations=9, phase="x", status=status
    )


def test_a_fast_task_writes_its_events_once_and_publishes_no_state_at_its_end() -> None:
    store, states = CountingStore(), []
    publisher = ProgressPublisher(store=store, run_id="r", update_state=states.append, interval=10)
    for n in range(5):
        publisher(progress(n, ProgressStatus.STARTED if n == 0 else ProgressStatus.PROGRESS))
    publisher.flush(final=True)
    assert store.writes == 1 and len(store.events("r")) == 5
    assert states == []


def test_a_slow_step_shows_its_progress_within_the_interval() -> None:
    store, states = CountingStore(), []

    async def slow_task() -> int:
        publisher = ProgressPublisher(store=store, run_id="r", update_state=states.append, interval=0.05)
        publisher(progress(0, ProgressStatus.STARTED))
        await asyncio.sleep(0.2)  # a model call: the event loop is free, the timer fires
        written_while_running = len(store.events("r"))
        publisher(progress(1))
        publisher.flush(final=True)
        return written_while_running

    assert asyncio.run(slow_task()) == 1
    assert [s["status"] for s in states] == ["started"]
    assert len(store.events("r")) == 2


def test_a_store_that_fails_never_fails_the_run_and_each_lost_write_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(InMemoryRunStore):
        def append_events(self, root_run_id: str, events: Any) -> None:
            raise ConnectionError("database away")

    states: list[dict[str, Any]] = []
    publisher = ProgressPublisher(store=Broken(), run_id="r", update_state=states.append, interval=0)
    with caplog.at_level(logging.WARNING, logger="agentloop.orchestration.store.seams"):
        publisher(progress(0))  # the interval has passed: written at once, and lost
        publisher(progress(1))
        publisher.flush(final=True)  # nothing left to write

    lost = [(r.getMessage(), type(r.exc_info[1]) if r.exc_info else None) for r in caplog.records]
    assert lost == [("could not record 1 progress event(s) of run r", ConnectionError)] * 2
    assert [s["iteration"] for s in states] == [0, 1]  # the task's state still shows the progress


def test_a_state_that_cannot_be_published_is_logged_and_the_events_are_still_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def refuse(state: dict[str, Any]) -> None:
        raise RuntimeError("result backend away")

    store = CountingStore()
    publisher = ProgressPublisher(store=store, run_id="r", update_state=refuse, interval=0)
    with caplog.at_level(logging.WARNING, logger="agentloop.orchestration.store.seams"):
        publisher(progress(0))

    [record] = caplog.records
    assert record.getMessage() == "could not publish progress of run r"
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)  # with its traceback
    assert len(store.events("r")) == 1


def test_a_pack_publishes_its_state_from_a_thread_one_at_a_time_and_settles_before_its_end() -> None:
    """A pack's ``PROGRESS`` state goes out from its threads (``state_offload``): a publication
    held up (the result backend, the broker behind other threads) no longer holds the pack's event
    loop; the latest event waits for the one in flight; ``settle`` waits for the last."""
    from agentloop.orchestration.packing.threads import pack_threads

    store, states, threads = CountingStore(), [], set()
    release = threading.Event()

    both: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def held(state: dict[str, Any]) -> None:
        threads.add(threading.get_ident())
        release.wait(timeout=10)  # the first publication is held until the loop has gone on
        states.append(state)
        if len(states) == 2:
            loop, published = both[0]
            loop.call_soon_threadsafe(published.set)

    async def pack() -> list[int]:
        both.append((asyncio.get_running_loop(), asyncio.Event()))
        publisher = ProgressPublisher(store=store, run_id="r", update_state=held, interval=0)
        with pack_threads() as offload:
            publisher.state_offload = offload
            publisher(progress(0))  # due at once: handed to a thread
            gone_on = []
            for n in (1, 2):  # the loop goes on while the publication is held
                await asyncio.sleep(0)
                publisher(progress(n))
                gone_on.append(n)
            release.set()
            await both[0][1].wait()  # the latest (2) follows once the first has gone out
            await publisher.settle()
            publisher.flush(final=True)
            return gone_on

    assert asyncio.run(pack()) == [1, 2]
    assert threading.get_ident() not in threads
    assert [s["iteration"] for s in states] == [0, 2]
    assert len(store.events("r")) == 3

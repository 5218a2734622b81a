"""A task's progress has two paces: its ``PROGRESS`` state (``state_interval``, what Flower shows) and
the batch its events are written to the run store in (``interval``). A Celery task shows a model-paced
loop's iterations while writing its events once, with its result; iterations faster than the state's
pace are throttled."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from agentloop.loops import ProgressEvent, ProgressStatus
from agentloop.orchestration.celery_adapter.tasks import EVENTS_INTERVAL, PROGRESS_INTERVAL
from agentloop.orchestration.store import InMemoryRunStore, seams
from agentloop.orchestration.store.seams import ProgressPublisher


class CountingStore(InMemoryRunStore):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[int] = []

    def append_events(self, root_run_id: str, events: Any) -> None:
        self.writes.append(len(events))
        super().append_events(root_run_id, events)


def progress(n: int) -> ProgressEvent:
    status = ProgressStatus.STARTED if n == 0 else ProgressStatus.PROGRESS
    return ProgressEvent(
        run_id="r", path="", runnable="L", iteration=n, max_iterations=9, phase="x", status=status
    )


def test_a_model_paced_loop_shows_each_iteration_and_writes_its_events_once_at_its_end() -> None:
    store, states = CountingStore(), []

    async def loop_task() -> list[int]:
        publisher = ProgressPublisher(
            store=store, run_id="r", update_state=states.append, interval=10, state_interval=0.05
        )
        for n in range(3):
            publisher(progress(n))
            await asyncio.sleep(0.15)  # a model call
        written_while_running = list(store.writes)
        publisher(progress(3))
        publisher.flush(final=True)
        return written_while_running

    assert asyncio.run(loop_task()) == []
    assert store.writes == [4]
    assert [state["iteration"] for state in states] == [0, 1, 2]  # the last one: the task's end follows


def test_events_written_while_a_long_task_runs_and_its_state_keep_their_own_paces() -> None:
    store, states = CountingStore(), []

    async def long_task() -> None:
        publisher = ProgressPublisher(
            store=store, run_id="r", update_state=states.append, interval=0.05, state_interval=10
        )
        publisher(progress(0))
        await asyncio.sleep(0.15)
        publisher(progress(1))
        publisher.flush(final=True)

    asyncio.run(long_task())
    assert store.writes == [1, 1]  # written within the interval, and the rest at the end
    assert states == []  # the state's pace is ten seconds


def test_iterations_faster_than_the_states_pace_are_throttled(monkeypatch: pytest.MonkeyPatch) -> None:
    store, states = CountingStore(), []
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(seams, "time", SimpleNamespace(monotonic=lambda: clock.now))
    publisher = ProgressPublisher(
        store=store, run_id="r", update_state=states.append, interval=10, state_interval=0.125
    )

    for n in range(30):  # an iteration every 1/32 s on the fake clock (no event loop: no timers)
        clock.now = n / 32
        publisher(progress(n))
    publisher.flush(final=True)

    assert store.writes == [30]
    # one state per 0.125 s, each the latest event when its turn came (the task's end follows the last)
    assert [state["iteration"] for state in states] == [4, 9, 14, 19, 24, 29]


def test_a_celery_task_writes_its_events_less_often_than_it_shows_its_state_and_at_most_ten_a_second() -> (
    None
):
    assert 0.1 <= PROGRESS_INTERVAL < EVENTS_INTERVAL


def test_a_checkpoint_writes_the_events_before_it_first() -> None:
    """A process killed after a checkpoint has stored every event up to it (a worker SIGKILLed mid-loop
    lost its run's ``start`` event, still buffered, while its checkpoint survived: seen as a run whose
    first stored event was ``resume``). The engine hands the task's publisher to its checkpointer."""
    store = CountingStore()
    store.create_run(run_id="r", runnable="L", input=1)

    async def loop_task() -> list[int]:
        publisher = ProgressPublisher(store=store, run_id="r", interval=60)
        checkpointer = seams.StoreCheckpointer(store, "r", before_save=publisher.flush)
        publisher(progress(0))
        publisher(progress(1))
        checkpointer.save(path="", iteration=1, state={"n": 1})
        return list(store.writes)

    assert asyncio.run(loop_task()) == [2]
    assert [event["iteration"] for _, event in store.events("r")] == [0, 1]
    assert store.loop_record("r", "").checkpoint == (1, {"n": 1})

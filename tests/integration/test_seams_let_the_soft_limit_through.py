"""The seams a task's store calls go through survive a store failure, but never Celery's soft time
limit raised during one of them: kept, it would run the task on until the hard limit kills its
process (issue 21)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from agentloop.actions.usage import Usage
from agentloop.loops import ProgressEvent, ProgressStatus
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.store.seams import ProgressPublisher, StoreCancelSignal, StoreUsageMeter


class TimesOut(InMemoryRunStore):
    """A store whose calls are interrupted by the soft time limit ``times`` times."""

    def __init__(self, times: int = 1) -> None:
        super().__init__()
        self.times = times

    def _interrupt(self) -> None:
        if self.times > 0:
            self.times -= 1
            raise SoftTimeLimitExceeded()

    def append_events(self, root_run_id: str, events: Any) -> None:
        self._interrupt()
        super().append_events(root_run_id, events)

    def is_cancel_requested(self, run_id: str) -> bool:
        self._interrupt()
        return super().is_cancel_requested(run_id)

    def add_usage(self, run_id: str, input_tokens: int, output_tokens: int) -> tuple[int, int]:
        self._interrupt()
        return super().add_usage(run_id, input_tokens, output_tokens)


def progress(n: int) -> ProgressEvent:
    return ProgressEvent(
        run_id="r",
        path="",
        runnable="L",
        iteration=n,
        max_iterations=9,
        phase="x",
        status=ProgressStatus.PROGRESS,
    )


def test_a_progress_write_lets_the_soft_limit_through_and_keeps_its_events() -> None:
    store = TimesOut()
    store.create_run(run_id="r", runnable="L", input=None)
    publisher = ProgressPublisher(store=store, run_id="r", interval=0)
    with pytest.raises(SoftTimeLimitExceeded):
        publisher(progress(0))
    publisher.flush(final=True)  # the failing task's end: nothing lost
    assert [event["iteration"] for _, event in store.events("r")] == [0]


def test_a_soft_limit_raised_into_a_timer_write_is_raised_by_the_next_event() -> None:
    store = TimesOut()
    store.create_run(run_id="r", runnable="L", input=None)

    async def task() -> None:
        publisher = ProgressPublisher(store=store, run_id="r", interval=0.01)
        publisher(progress(0))
        await asyncio.sleep(0.05)  # a model call: the timer (due sooner) writes, and is interrupted
        assert store.times == 0
        publisher(progress(1))

    with pytest.raises(SoftTimeLimitExceeded):
        asyncio.run(task())


def test_the_cancel_signal_lets_the_soft_limit_through() -> None:
    store = TimesOut()
    store.create_run(run_id="r", runnable="L", input=None)
    with pytest.raises(SoftTimeLimitExceeded):
        StoreCancelSignal(store, "r", interval=0).is_cancelled()


def test_a_usage_flush_after_a_failure_lets_the_soft_limit_through_and_keeps_the_usage() -> None:
    store = TimesOut()
    store.create_run(run_id="r", runnable="L", input=None)
    meter = StoreUsageMeter(store, "r", interval=60)
    meter.record(Usage(input_tokens=3, output_tokens=4))
    with pytest.raises(SoftTimeLimitExceeded):
        meter.flush(after_failure=True)
    meter.flush(after_failure=True)
    record = store.get_run("r")
    assert record is not None and (record.input_tokens, record.output_tokens) == (3, 4)

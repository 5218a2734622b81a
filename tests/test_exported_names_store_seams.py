"""The run store's seams for the core, tested by name: ``StoreCheckpointer`` saves at most every
``interval`` seconds per loop, ``StoreCancelSignal`` asks the store at most every ``interval``
seconds per run and process, ``StoreUsageMeter`` reads the run no more than it must, and the
``ProgressPublisher`` writes a task's events together.

Their clock is a fake one (``agentloop.orchestration.store.seams.time``): every instant is set by the test.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any
from weakref import WeakKeyDictionary

import pytest

from agentloop import CancelSignal, Checkpointer, new_run_id
from agentloop.actions import TokenBudgetExceededError, Usage
from agentloop.loops import ProgressEvent, ProgressStatus
from agentloop.orchestration.errors import StoreUnavailableError
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.store.seams import (
    ProgressPublisher,
    StoreCancelSignal,
    StoreCheckpointer,
    StoreUsageMeter,
)


class FakeClock:
    def __init__(self, now: float = 500.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def seams_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr("agentloop.orchestration.store.seams.time", SimpleNamespace(monotonic=fake.monotonic))
    return fake


class CountingStore(InMemoryRunStore):
    """Counts the questions and writes the seams send to the store."""

    def __init__(self) -> None:
        super().__init__()
        self.saves: list[tuple[str, int]] = []
        self.cancel_questions = 0
        self.loop_reads = 0

    def save_checkpoint(self, run_id: str, path: str, iteration: int, state: Any) -> None:
        self.saves.append((path, iteration))
        super().save_checkpoint(run_id, path, iteration, state)

    def is_cancel_requested(self, run_id: str) -> bool:
        self.cancel_questions += 1
        return super().is_cancel_requested(run_id)

    def loop_record(self, run_id: str, path: str) -> Any:
        self.loop_reads += 1
        return super().loop_record(run_id, path)


# ----- StoreCheckpointer ------------------------------------------------------------------------------


def test_without_an_interval_every_finished_iteration_is_saved(seams_clock: FakeClock) -> None:
    store = CountingStore()
    checkpointer = StoreCheckpointer(store, "r")
    assert isinstance(checkpointer, Checkpointer)

    for iteration in (1, 2, 3):
        checkpointer.save(path="", iteration=iteration, state={"n": iteration})

    assert store.saves == [("", 1), ("", 2), ("", 3)]
    assert store.loop_record("r", "").checkpoint == (3, {"n": 3})


def test_with_an_interval_a_loop_is_saved_at_most_once_per_interval_counted_from_its_load(
    seams_clock: FakeClock,
) -> None:
    store = CountingStore()
    checkpointer = StoreCheckpointer(store, "r", interval=5.0)
    assert checkpointer.load(path="") is None  # the loop starts: its interval starts too

    for iteration, at in enumerate([1.0, 4.999, 5.0, 9.0, 9.999, 10.0, 30.0], start=1):
        seams_clock.now = 500.0 + at
        checkpointer.save(path="", iteration=iteration, state={"n": iteration})

    # saved at 5.0 (not 4.999), then 5 s later at 10.0, then at 30.0
    assert store.saves == [("", 3), ("", 6), ("", 7)]
    assert store.loop_record("r", "").checkpoint == (7, {"n": 7})


def test_each_loop_path_has_its_own_interval_and_a_loop_never_loaded_is_saved_at_once(
    seams_clock: FakeClock,
) -> None:
    store = CountingStore()
    checkpointer = StoreCheckpointer(store, "r", interval=5.0)
    checkpointer.load(path="pipeline/0")

    seams_clock.now += 1
    checkpointer.save(path="pipeline/0", iteration=1, state=1)  # 1 s after its load: skipped
    checkpointer.save(path="pipeline/1", iteration=1, state=1)  # never loaded, never saved: saved
    seams_clock.now += 1
    checkpointer.save(path="pipeline/1", iteration=2, state=2)  # 1 s after its save: skipped

    assert store.saves == [("pipeline/1", 1)]


def test_a_checkpoint_read_with_the_loops_record_is_used_once_without_asking_the_store(
    seams_clock: FakeClock,
) -> None:
    store = CountingStore()
    store.save_checkpoint("r", "", 4, {"n": 4})
    checkpointer = StoreCheckpointer(store, "r", loaded={"": (4, {"n": 4}), "other": None})

    assert checkpointer.load(path="") == (4, {"n": 4})
    assert checkpointer.load(path="other") is None
    assert store.loop_reads == 0
    assert checkpointer.load(path="") == (4, {"n": 4})  # a second load reads the store
    assert store.loop_reads == 1


# ----- StoreCancelSignal ------------------------------------------------------------------------------


def test_the_store_is_asked_at_most_once_per_interval_and_a_cancel_is_seen_after_it(
    seams_clock: FakeClock,
) -> None:
    store, run_id = CountingStore(), new_run_id()
    store.create_run(run_id=run_id, runnable="x", input=None)
    signal = StoreCancelSignal(store, run_id, interval=0.5)
    assert isinstance(signal, CancelSignal)

    assert signal.is_cancelled() is False
    store.request_cancel(run_id)
    seams_clock.now += 0.499
    assert signal.is_cancelled() is False  # the cached answer, younger than the interval
    assert store.cancel_questions == 1
    seams_clock.now += 0.001
    assert signal.is_cancelled() is True
    assert store.cancel_questions == 2


def test_the_tasks_of_one_run_in_one_process_share_one_answer_and_a_cancel_stays(
    seams_clock: FakeClock,
) -> None:
    store, run_id = CountingStore(), new_run_id()
    store.create_run(run_id=run_id, runnable="x", input=None)
    store.request_cancel(run_id)
    first, second = StoreCancelSignal(store, run_id), StoreCancelSignal(store, run_id)

    assert first.is_cancelled() is True
    assert second.is_cancelled() is True  # another task of the run: the process's answer
    seams_clock.now += 3600
    assert first.is_cancelled() is True  # once cancelled, never asked again
    assert store.cancel_questions == 1


def test_other_runs_are_asked_for_themselves(seams_clock: FakeClock) -> None:
    store, cancelled, running = CountingStore(), new_run_id(), new_run_id()
    for run_id in (cancelled, running):
        store.create_run(run_id=run_id, runnable="x", input=None)
    store.request_cancel(cancelled)

    assert StoreCancelSignal(store, cancelled).is_cancelled() is True
    assert StoreCancelSignal(store, running).is_cancelled() is False
    assert store.cancel_questions == 2


def test_a_store_that_cannot_answer_means_not_cancelled_and_is_logged(
    seams_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    class Down(InMemoryRunStore):
        def is_cancel_requested(self, run_id: str) -> bool:
            raise ConnectionError("database away")

    run_id = new_run_id()
    with caplog.at_level(logging.WARNING, logger="agentloop.orchestration.store.seams"):
        assert StoreCancelSignal(Down(), run_id).is_cancelled() is False

    [record] = caplog.records
    assert record.getMessage() == f"could not read the cancel flag of run {run_id}"
    assert record.exc_info is not None and isinstance(record.exc_info[1], ConnectionError)


def test_by_default_the_store_is_asked_again_half_a_second_later(seams_clock: FakeClock) -> None:
    store, run_id = CountingStore(), new_run_id()
    store.create_run(run_id=run_id, runnable="x", input=None)
    signal = StoreCancelSignal(store, run_id)
    signal.is_cancelled()
    seams_clock.now += 0.5
    signal.is_cancelled()
    assert store.cancel_questions == 2


def test_the_per_process_answers_are_forgotten_past_ten_thousand_runs(
    seams_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CountingStore()
    seen = {f"old-{n}": (seams_clock.now, False) for n in range(10_000)}
    monkeypatch.setattr(StoreCancelSignal, "_seen", WeakKeyDictionary({store: seen}))  # per store

    StoreCancelSignal(store, "one-more").is_cancelled()  # 10 000 kept: room for one more
    assert len(seen) == 10_001
    StoreCancelSignal(store, "and-another").is_cancelled()  # past 10 000: start afresh
    assert seen == {"and-another": (seams_clock.now, False)}


# ----- StoreCheckpointer: sub-second intervals --------------------------------------------------------


def test_an_interval_below_a_second_throttles_too(seams_clock: FakeClock) -> None:
    store = CountingStore()
    checkpointer = StoreCheckpointer(store, "r", interval=0.5)
    checkpointer.save(path="", iteration=1, state=1)
    seams_clock.now += 0.25
    checkpointer.save(path="", iteration=2, state=2)
    seams_clock.now += 0.25
    checkpointer.save(path="", iteration=3, state=3)
    assert store.saves == [("", 1), ("", 3)]


# ----- StoreUsageMeter ----------------------------------------------------------------------------------


class ReadCountingStore(InMemoryRunStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.additions = 0

    def get_run(self, run_id: str) -> Any:
        self.reads += 1
        return super().get_run(run_id)

    def add_usage(self, run_id: str, input_tokens: int, output_tokens: int) -> tuple[int, int]:
        self.additions += 1
        return super().add_usage(run_id, input_tokens, output_tokens)


def test_a_fresh_meter_has_used_nothing_and_knows_no_budget_yet() -> None:
    meter = StoreUsageMeter(InMemoryRunStore(), "r")
    assert (meter.used, meter.budget) == (0, None)


def test_without_a_budget_the_run_is_read_once_and_a_call_without_tokens_writes_nothing() -> None:
    store = ReadCountingStore()
    store.create_run(run_id="r", runnable="x", input=None)
    meter = StoreUsageMeter(store, "r")

    meter.check()
    meter.check()
    meter.record(Usage())
    meter.record(Usage(input_tokens=1))

    assert (store.reads, store.additions, meter.used) == (1, 1, 1)


def test_a_budget_spent_by_other_tasks_stops_a_fresh_meters_first_check() -> None:
    store = InMemoryRunStore()
    store.create_run(run_id="r", runnable="x", input=None, token_budget=10)
    store.add_usage("r", 6, 4)  # other tasks of the run spent it
    with pytest.raises(TokenBudgetExceededError) as spent:
        StoreUsageMeter(store, "r").check()
    assert str(spent.value) == "token budget exceeded: 10 of 10 tokens used"


def test_a_call_recorded_before_any_check_still_meets_the_budget() -> None:
    store = InMemoryRunStore()
    store.create_run(run_id="r", runnable="x", input=None, token_budget=10)
    with pytest.raises(TokenBudgetExceededError):
        StoreUsageMeter(store, "r").record(Usage(input_tokens=8, output_tokens=3))


def test_without_a_budget_calls_are_summed_and_written_once_and_the_budget_is_read_once_per_run() -> None:
    store = ReadCountingStore()
    store.create_run(run_id="r", runnable="x", input=None)
    meter = StoreUsageMeter(store, "r", interval=60)

    for _ in range(3):
        meter.check()
        meter.record(Usage(input_tokens=10, output_tokens=2))
    assert (store.reads, store.additions) == (1, 0)  # nothing written per call
    meter.flush()
    assert store.additions == 1 and store.get_run("r").input_tokens == 30  # type: ignore[union-attr]

    reads = store.reads
    other_task = StoreUsageMeter(store, "r", interval=60)  # another task of the run, same process
    other_task.check()
    other_task.record(Usage(output_tokens=1))
    other_task.flush()
    assert store.reads == reads  # the run's budget (none) was known already
    assert (store.get_run("r").input_tokens, store.get_run("r").output_tokens) == (30, 7)  # type: ignore[union-attr]


def test_usage_is_written_once_the_interval_has_passed(seams_clock: FakeClock) -> None:
    store = ReadCountingStore()
    store.create_run(run_id="r", runnable="x", input=None)
    meter = StoreUsageMeter(store, "r", interval=1.0)
    meter.record(Usage(input_tokens=1))
    seams_clock.now += 0.5
    meter.record(Usage(input_tokens=1))
    assert store.additions == 0
    seams_clock.now += 0.6
    meter.record(Usage(input_tokens=1))
    assert store.additions == 1 and store.get_run("r").input_tokens == 3  # type: ignore[union-attr]


def test_usage_that_could_not_be_written_is_kept_and_a_failed_task_s_write_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = ReadCountingStore()
    store.create_run(run_id="r", runnable="x", input=None)
    meter = StoreUsageMeter(store, "r", interval=60)
    meter.record(Usage(input_tokens=5))
    down = StoreUnavailableError("the database is away", seconds=1)

    def failing(run_id: str, input_tokens: int, output_tokens: int) -> tuple[int, int]:
        raise down

    store.add_usage = failing  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailableError):
        meter.flush()
    meter.flush(after_failure=True)  # logged, not raised over the loop's own error
    assert "could not record the token usage of run r" in caplog.text
    del store.add_usage
    meter.flush()
    assert store.get_run("r").input_tokens == 5  # type: ignore[union-attr]


def test_a_checkpoint_carries_the_usage_not_written_yet_and_a_failed_one_keeps_it() -> None:
    """A run without a budget buffers its usage: each checkpoint writes it with itself, so a process
    killed after a checkpoint has counted every call before it; a checkpoint that fails keeps it."""
    store = ReadCountingStore()
    store.create_run(run_id="r", runnable="x", input=None)
    meter = StoreUsageMeter(store, "r", interval=60)
    checkpointer = StoreCheckpointer(store, "r", meter=meter)
    meter.record(Usage(input_tokens=5, output_tokens=11))
    checkpointer.save(path="", iteration=1, state={"n": 1})
    assert store.additions == 0  # no write of its own: it went with the checkpoint
    assert (store.get_run("r").input_tokens, store.get_run("r").output_tokens) == (5, 11)  # type: ignore[union-attr]

    meter.record(Usage(input_tokens=5, output_tokens=11))
    down = StoreUnavailableError("the database is away", seconds=1)

    def failing(*args: Any, **kwargs: Any) -> None:
        raise down

    store.save_checkpoints = failing  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailableError):
        checkpointer.save(path="", iteration=2, state={"n": 2})
    del store.save_checkpoints
    checkpointer.save(path="", iteration=2, state={"n": 2})
    assert store.get_run("r").input_tokens == 10  # type: ignore[union-attr]
    checkpointer.save(path="", iteration=3, state={"n": 3})  # nothing buffered: the checkpoint alone
    assert store.get_run("r").input_tokens == 10 and meter.take() == Usage()  # type: ignore[union-attr]


def test_a_budgeted_run_is_still_read_and_written_at_every_call() -> None:
    store = ReadCountingStore()
    store.create_run(run_id="r", runnable="x", input=None, token_budget=1000)
    meter = StoreUsageMeter(store, "r", interval=60)
    for _ in range(3):
        meter.check()
        meter.record(Usage(input_tokens=10))
    assert (store.reads, store.additions) == (3, 3)


# ----- ProgressPublisher's default interval -------------------------------------------------------------


def test_by_default_events_are_written_once_a_fifth_of_a_second_has_passed(seams_clock: FakeClock) -> None:
    store = CountingStore()
    writes: list[int] = []
    store.append_events = lambda run_id, events: writes.append(len(events))  # type: ignore[method-assign]
    publisher = ProgressPublisher(store=store, run_id="r")

    publisher(progress(0))
    seams_clock.now += 0.1
    publisher(progress(1))
    assert writes == []
    seams_clock.now += 0.15
    publisher(progress(2))
    assert writes == [3]


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

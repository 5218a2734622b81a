"""The run store's seams for the core, tested by name: ``StoreCheckpointer`` saves at most every
``interval`` seconds per loop, and ``StoreCancelSignal`` asks the store at most every ``interval``
seconds per run and process.

Their clock is a fake one (``orchestration.store.seams.time``): every instant is set by the test.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from agentloop import CancelSignal, Checkpointer, new_run_id
from orchestration.store import InMemoryRunStore
from orchestration.store.seams import StoreCancelSignal, StoreCheckpointer


class FakeClock:
    def __init__(self, now: float = 500.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr("orchestration.store.seams.time", SimpleNamespace(monotonic=fake.monotonic))
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


def test_without_an_interval_every_finished_iteration_is_saved(clock: FakeClock) -> None:
    store = CountingStore()
    checkpointer = StoreCheckpointer(store, "r")
    assert isinstance(checkpointer, Checkpointer)

    for iteration in (1, 2, 3):
        checkpointer.save(path="", iteration=iteration, state={"n": iteration})

    assert store.saves == [("", 1), ("", 2), ("", 3)]
    assert store.loop_record("r", "").checkpoint == (3, {"n": 3})


def test_with_an_interval_a_loop_is_saved_at_most_once_per_interval_counted_from_its_load(
    clock: FakeClock,
) -> None:
    store = CountingStore()
    checkpointer = StoreCheckpointer(store, "r", interval=5.0)
    assert checkpointer.load(path="") is None  # the loop starts: its interval starts too

    for iteration, at in enumerate([1.0, 4.999, 5.0, 9.0, 9.999, 10.0, 30.0], start=1):
        clock.now = 500.0 + at
        checkpointer.save(path="", iteration=iteration, state={"n": iteration})

    # saved at 5.0 (not 4.999), then 5 s later at 10.0, then at 30.0
    assert store.saves == [("", 3), ("", 6), ("", 7)]
    assert store.loop_record("r", "").checkpoint == (7, {"n": 7})


def test_each_loop_path_has_its_own_interval_and_a_loop_never_loaded_is_saved_at_once(
    clock: FakeClock,
) -> None:
    store = CountingStore()
    checkpointer = StoreCheckpointer(store, "r", interval=5.0)
    checkpointer.load(path="pipeline/0")

    clock.now += 1
    checkpointer.save(path="pipeline/0", iteration=1, state=1)  # 1 s after its load: skipped
    checkpointer.save(path="pipeline/1", iteration=1, state=1)  # never loaded, never saved: saved
    clock.now += 1
    checkpointer.save(path="pipeline/1", iteration=2, state=2)  # 1 s after its save: skipped

    assert store.saves == [("pipeline/1", 1)]


def test_a_checkpoint_read_with_the_loops_record_is_used_once_without_asking_the_store(
    clock: FakeClock,
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


def test_the_store_is_asked_at_most_once_per_interval_and_a_cancel_is_seen_after_it(clock: FakeClock) -> None:
    store, run_id = CountingStore(), new_run_id()
    store.create_run(run_id=run_id, runnable="x", input=None)
    signal = StoreCancelSignal(store, run_id, interval=0.5)
    assert isinstance(signal, CancelSignal)

    assert signal.is_cancelled() is False
    store.request_cancel(run_id)
    clock.now += 0.499
    assert signal.is_cancelled() is False  # the cached answer, younger than the interval
    assert store.cancel_questions == 1
    clock.now += 0.001
    assert signal.is_cancelled() is True
    assert store.cancel_questions == 2


def test_the_tasks_of_one_run_in_one_process_share_one_answer_and_a_cancel_stays(clock: FakeClock) -> None:
    store, run_id = CountingStore(), new_run_id()
    store.create_run(run_id=run_id, runnable="x", input=None)
    store.request_cancel(run_id)
    first, second = StoreCancelSignal(store, run_id), StoreCancelSignal(store, run_id)

    assert first.is_cancelled() is True
    assert second.is_cancelled() is True  # another task of the run: the process's answer
    clock.now += 3600
    assert first.is_cancelled() is True  # once cancelled, never asked again
    assert store.cancel_questions == 1


def test_other_runs_are_asked_for_themselves(clock: FakeClock) -> None:
    store, cancelled, running = CountingStore(), new_run_id(), new_run_id()
    for run_id in (cancelled, running):
        store.create_run(run_id=run_id, runnable="x", input=None)
    store.request_cancel(cancelled)

    assert StoreCancelSignal(store, cancelled).is_cancelled() is True
    assert StoreCancelSignal(store, running).is_cancelled() is False
    assert store.cancel_questions == 2


def test_a_store_that_cannot_answer_means_not_cancelled_and_is_logged(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    class Down(InMemoryRunStore):
        def is_cancel_requested(self, run_id: str) -> bool:
            raise ConnectionError("database away")

    run_id = new_run_id()
    with caplog.at_level(logging.WARNING, logger="orchestration.store.seams"):
        assert StoreCancelSignal(Down(), run_id).is_cancelled() is False

    [record] = caplog.records
    assert record.getMessage() == f"could not read the cancel flag of run {run_id}"
    assert record.exc_info is not None and isinstance(record.exc_info[1], ConnectionError)

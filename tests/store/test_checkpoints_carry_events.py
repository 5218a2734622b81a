"""A checkpoint carries the task's buffered progress events in its own transaction: a model-paced
loop saves after each call and makes no separate event writes; events a failed save gave out are
put back, first, and written later; the PROGRESS state keeps its own pace."""

from __future__ import annotations

from typing import Any

import pytest

from loops import ProgressEvent, ProgressStatus
from orchestration.store import InMemoryRunStore, RunStore, StoreUnavailableError
from orchestration.store.seams import ProgressPublisher, StoreCheckpointer


def event(n: int) -> ProgressEvent:
    return ProgressEvent(
        run_id="r1", path="loop", runnable="L", iteration=n, max_iterations=9, phase="iteration",
        status=ProgressStatus.PROGRESS,
    )  # fmt: skip


def test_a_checkpoint_and_its_events_are_stored_together(run_store: RunStore) -> None:
    events = [event(n).to_dict() for n in (1, 2)]

    run_store.save_checkpoint("r1", "loop", 2, {"i": 2}, events=events)

    assert run_store.loop_record("r1", "loop").checkpoint == (2, {"i": 2})
    assert [stored["iteration"] for _, stored in run_store.events("r1")] == [1, 2]


class CountingStore(InMemoryRunStore):
    def __init__(self) -> None:
        super().__init__()
        self.event_writes = 0
        self.fail_next_save = False

    def append_events(self, root_run_id: str, events: Any) -> None:
        self.event_writes += 1
        super().append_events(root_run_id, events)

    def save_checkpoint(self, run_id: str, path: str, iteration: int, state: Any, **kw: Any) -> None:
        if self.fail_next_save:
            self.fail_next_save = False
            raise StoreUnavailableError("database away", seconds=0)
        super().save_checkpoint(run_id, path, iteration, state, **kw)


def test_a_checkpointed_loop_writes_its_events_with_its_saves_not_apart() -> None:
    store, states = CountingStore(), []
    publisher = ProgressPublisher(store=store, run_id="r1", update_state=states.append, interval=60)
    checkpointer = StoreCheckpointer(store, "r1", events=publisher)

    for n in range(1, 4):
        publisher(event(n))
        checkpointer.save(path="loop", iteration=n, state={"i": n})
    publisher(event(4))
    store.finish_loop("r1", "loop", {"done": True}, events=publisher.take())

    assert store.event_writes == 0
    assert [stored["iteration"] for _, stored in store.events("r1")] == [1, 2, 3, 4]


def test_events_a_failed_save_gave_out_are_written_later_and_first() -> None:
    store = CountingStore()
    publisher = ProgressPublisher(store=store, run_id="r1", interval=60)
    checkpointer = StoreCheckpointer(store, "r1", events=publisher)
    publisher(event(1))
    store.fail_next_save = True

    with pytest.raises(StoreUnavailableError):
        checkpointer.save(path="loop", iteration=1, state={"i": 1})
    publisher(event(2))
    checkpointer.save(path="loop", iteration=2, state={"i": 2})

    assert [stored["iteration"] for _, stored in store.events("r1")] == [1, 2]
    assert store.loop_record("r1", "loop").checkpoint == (2, {"i": 2})


def test_taking_the_events_leaves_the_progress_state_to_its_pace() -> None:
    states: list[dict[str, Any]] = []
    publisher = ProgressPublisher(
        store=InMemoryRunStore(), run_id="r1", update_state=states.append, interval=60, state_interval=0
    )
    publisher(event(1))
    assert publisher.take_events() and [state["iteration"] for state in states] == [1]
    publisher(event(2))
    publisher.flush()
    assert [state["iteration"] for state in states] == [1, 2]

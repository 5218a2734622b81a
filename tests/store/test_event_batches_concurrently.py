"""Progress events written by many tasks of one workflow at once (the branches of a composite):
every batch keeps its order, and a reader polling with ``after_id`` never skips an event that
commits after it read a higher id (on PostgreSQL each batch is one statement under the root
run's advisory lock: ``store/dialects.py``)."""

from __future__ import annotations

import threading
import time
from typing import Any

from orchestration.store import RunStore, SqlRunStore

WRITERS, BATCHES, BATCH = 12, 20, 5


def _batch(writer: int, batch: int) -> list[dict[str, Any]]:
    return [
        {"path": f"branch/{writer}", "phase": "iteration", "iteration": batch * BATCH + n}
        for n in range(BATCH)
    ]


def test_a_polling_reader_sees_every_event_of_concurrent_writers_in_order(run_store: RunStore) -> None:
    run_store.create_run(run_id="root", runnable="fan", input=None)
    done = threading.Event()
    errors: list[BaseException] = []

    def write(writer: int) -> None:
        try:
            for batch in range(BATCHES):
                events = _batch(writer, batch)
                if batch % 2:
                    run_store.append_events("root", events)
                else:  # a branch's last events go with its result
                    run_store.finish_loop("root", f"branch/{writer}/{batch}", {"n": batch}, events=events)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    polled: list[tuple[int, dict[str, Any]]] = []

    def poll() -> None:
        while True:
            last = done.is_set()
            polled.extend(run_store.events("root", after_id=polled[-1][0] if polled else 0))
            if last:
                return
            time.sleep(0.001)

    writers = [threading.Thread(target=write, args=(index,)) for index in range(WRITERS)]
    reader = threading.Thread(target=poll)
    reader.start()
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    reader.join()

    assert errors == []
    stored = run_store.events("root")
    assert len(stored) == WRITERS * BATCHES * BATCH
    assert polled == stored  # nothing skipped, nothing twice
    for writer in range(WRITERS):
        mine = [event["iteration"] for _, event in stored if event["path"] == f"branch/{writer}"]
        assert mine == list(range(BATCHES * BATCH))  # each writer's events in the order written
    if isinstance(run_store, SqlRunStore):
        record = run_store.loop_record("root", "branch/0/0")
        assert record.finished and record.result == {"n": 0}

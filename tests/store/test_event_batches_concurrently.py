"""Progress events written by many tasks of one workflow at once (the branches of a composite):
every batch keeps its order, and a reader polling with ``after_id`` never skips an event that
commits after it read a higher id (on PostgreSQL each batch is one statement under the root
run's advisory lock: ``store/dialects.py``)."""

from __future__ import annotations

import threading
import time
from typing import Any

from agentloop.orchestration.store import RunStore, SqlRunStore

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


def test_each_level_of_a_run_fails_once_when_its_tasks_fail_together(run_store: RunStore) -> None:
    # Every branch of a composite that fails reports the levels enclosing it; two reports of the
    # same level, written at once, must leave one ``failed`` event for it.
    run_store.create_run(run_id="root", runnable="fan", input=None)
    start = threading.Barrier(WRITERS)
    errors: list[BaseException] = []

    def fail(writer: int) -> None:
        try:
            start.wait(timeout=10)
            run_store.append_events(
                "root",
                [
                    {"path": f"branch/{writer}", "phase": "iteration", "status": "progress"},
                    {"path": f"branch/{writer}", "phase": "cancelled", "status": "failed"},
                    {"path": "", "phase": "cancelled", "status": "failed", "writer": writer},
                ],
            )
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=fail, args=(writer,)) for writer in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    events = [event for _, event in run_store.events("root")]
    failed = [event["path"] for event in events if event["status"] == "failed"]
    assert sorted(failed) == sorted(["", *(f"branch/{writer}" for writer in range(WRITERS))])
    assert len([event for event in events if event["status"] == "progress"]) == WRITERS  # the rest is kept
    run_store.append_events("root", [{"path": "", "phase": "cancelled", "status": "failed"}])
    assert len(run_store.events("root")) == len(events)  # later, too


def test_two_failed_events_for_one_path_in_one_batch_leave_one(run_store: RunStore) -> None:
    # a task that fails as it is cancelled reports its path twice in the batch it writes last
    run_store.create_run(run_id="root", runnable="fan", input=None)

    run_store.append_events(
        "root",
        [
            {"path": "branch/0", "phase": "iteration", "status": "progress"},
            {"path": "branch/0", "phase": "error", "status": "failed", "message": "first"},
            {"path": "branch/1", "phase": "error", "status": "failed"},
            {"path": "branch/0", "phase": "cancelled", "status": "failed", "message": "second"},
            {"path": "", "phase": "error", "status": "failed"},
        ],
    )

    events = [(event["path"], event["status"], event.get("message")) for _, event in run_store.events("root")]
    assert events == [
        ("branch/0", "progress", None),
        ("branch/0", "failed", "first"),  # the first failure of a path is the one kept
        ("branch/1", "failed", None),
        ("", "failed", None),
    ]

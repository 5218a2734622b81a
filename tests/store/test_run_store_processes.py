"""Worker processes sharing one database: usage adds up exactly and events keep their order."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from typing import Any

from sqlalchemy import Engine

from agentloop.orchestration.store import SqlRunStore, create_engine_for

PROCESSES = 2
INCREMENTS = 200
EVENTS = 50


def _engine(url: str) -> Engine:
    if url.startswith("postgresql"):
        # This checks atomicity, not durability: do not wait for each commit's WAL flush.
        return create_engine_for(url, connect_args={"options": "-c synchronous_commit=off"})
    return create_engine_for(url)


def _spend_tokens(url: str, barrier: Barrier) -> None:
    engine = _engine(url)
    try:
        store = SqlRunStore(engine)
        barrier.wait(timeout=60)
        for _ in range(INCREMENTS):
            store.add_usage("shared", 1, 3)
    finally:
        engine.dispose()


def _emit_events(url: str, barrier: Barrier, worker: int) -> None:
    engine = _engine(url)
    try:
        store = SqlRunStore(engine)
        barrier.wait(timeout=60)
        for index in range(EVENTS):
            store.append_events(
                "shared", [{"path": f"branch/{worker}", "iteration": index, "status": "progress"}]
            )
    finally:
        engine.dispose()


def _run_workers(target: Callable[..., None], url: str, extra: list[tuple[Any, ...]]) -> None:
    # fork starts in milliseconds; the children only use engines they create themselves
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    context: Any = multiprocessing.get_context(method)
    barrier = context.Barrier(PROCESSES)
    processes = [context.Process(target=target, args=(url, barrier, *args)) for args in extra]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [process.exitcode for process in processes] == [0] * PROCESSES


def test_usage_added_by_two_processes_at_once_sums_exactly(sql_url: str) -> None:
    store = SqlRunStore(create_engine_for(sql_url))
    store.create_run(run_id="shared", runnable="composite", input={})

    _run_workers(_spend_tokens, sql_url, [() for _ in range(PROCESSES)])

    assert store.add_usage("shared", 0, 0) == (PROCESSES * INCREMENTS, 3 * PROCESSES * INCREMENTS)
    record = store.get_run("shared")
    assert record is not None and record.total_tokens == 4 * PROCESSES * INCREMENTS
    store.engine.dispose()


def test_events_appended_by_two_processes_are_all_kept_in_each_ones_order(sql_url: str) -> None:
    _run_workers(_emit_events, sql_url, [(worker,) for worker in range(PROCESSES)])

    store = SqlRunStore(create_engine_for(sql_url))
    stored = store.events("shared")
    store.engine.dispose()
    assert len(stored) == PROCESSES * EVENTS
    ids = [event_id for event_id, _ in stored]
    assert ids == sorted(set(ids))
    for worker in range(PROCESSES):
        mine = [event["iteration"] for _, event in stored if event["path"] == f"branch/{worker}"]
        assert mine == list(range(EVENTS))

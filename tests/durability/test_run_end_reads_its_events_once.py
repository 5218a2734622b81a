"""A run's end reads its events once (``WorkflowEngine.finish``): its model failures (a degraded
run) and its loops' ``done`` events (one that stopped at its bound) come in one read, where two
were made for every run that ended (issue 36: a packed batch's runs make their store calls one
after another on the pack's event loop), and the store picks the events that judge it: a run of 50
loops that ended on their own reads no rows (it read all 50 ``done`` events, each decoded)."""

from __future__ import annotations

import asyncio
from typing import Any

from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.runtime.engine import WorkflowEngine
from agentloop.orchestration.store import InMemoryRunStore


class ReadCounting(InMemoryRunStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[Any] = []

        self.rows = 0

    def events(self, run_id: str, **filters: Any) -> list[tuple[int, dict[str, Any]]]:
        self.reads.append(filters)
        return self._counted(super().events(run_id, **filters))

    def run_end_events(self, run_id: str) -> list[tuple[int, dict[str, Any]]]:
        self.reads.append("ends")
        return self._counted(super().run_end_events(run_id))

    def _counted(self, rows: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, dict[str, Any]]]:
        self.rows += len(rows)
        return rows


def _event(phase: str, status: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"path": "loop", "runnable": "L", "iteration": 1, "max_iterations": 2, "phase": phase,
            "status": status, "message": "", "data": data, "at": 1.0}  # fmt: skip


def test_a_degraded_run_that_hit_its_bound_is_ended_after_one_read_of_its_events() -> None:
    store = ReadCounting()
    store.create_run(run_id="r", runnable="L", input=None)
    store.append_events(
        "r",
        [
            _event("model_unavailable", "progress", {"action": "plan", "reason": "model error: down"}),
            _event("iteration", "progress", {}),
            _event("done", "completed", {"stopped_by": "bound"}),
        ],
    )
    engine = WorkflowEngine(registry=RunnableRegistry(), store=store)

    asyncio.run(engine.finish("r", {"answer": 1}))

    assert len(store.reads) == 1 and store.rows == 2  # the failure and the bound, not the iteration
    record = store.get_run("r")
    assert record is not None and (record.status, record.stopped_by) == ("degraded", "bound")


def test_a_clean_run_is_ended_after_one_read_too() -> None:
    store = ReadCounting()
    store.create_run(run_id="r", runnable="L", input=None)
    store.append_events("r", [_event("done", "completed", {"stopped_by": "complete"})])
    engine = WorkflowEngine(registry=RunnableRegistry(), store=store)

    assert asyncio.run(engine.finish("r", 7)) == 7

    assert len(store.reads) == 1
    record = store.get_run("r")
    assert record is not None and (record.status, record.stopped_by) == ("succeeded", "complete")


def test_a_run_of_fifty_loops_that_ended_on_their_own_reads_no_event_at_its_end() -> None:
    store = ReadCounting()
    store.create_run(run_id="r", runnable="P", input=None)
    for stage in range(50):
        store.append_events(
            "r",
            [
                {**_event("start", "started", {}), "path": f"stage/{stage}"},
                {**_event("done", "completed", {"stopped_by": "complete"}), "path": f"stage/{stage}"},
            ],
        )
    store.append_events("r", [{**_event("done", "completed", {}), "path": ""}])  # the pipeline's
    engine = WorkflowEngine(registry=RunnableRegistry(), store=store)

    assert asyncio.run(engine.finish("r", 7)) == 7

    assert (store.reads, store.rows) == (["ends"], 0)
    record = store.get_run("r")
    assert record is not None and (record.status, record.stopped_by) == ("succeeded", "complete")

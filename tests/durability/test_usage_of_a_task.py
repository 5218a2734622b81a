"""A loop task's token usage, as the engine writes it: a run without a budget writes its usage
with the loop's result, in the statement that ends the task, whatever the number of model calls
(and reads nothing per call); a budgeted run is still read and written at every call; a failing
loop's usage is written before the failure is reported."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.runtime.engine import WorkflowEngine
from agentloop.orchestration.runtime.next_step import Done
from agentloop.orchestration.store import InMemoryRunStore, RunRecord
from agentloop.orchestration.wire import WorkflowNode


class CallCountingStore(InMemoryRunStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.usage_writes = 0

    def get_run(self, run_id: str) -> RunRecord | None:
        self.reads += 1
        return super().get_run(run_id)

    def add_usage(self, run_id: str, input_tokens: int, output_tokens: int) -> tuple[int, int]:
        self.usage_writes += 1
        return super().add_usage(run_id, input_tokens, output_tokens)


def _run(store: CallCountingStore, run_id: str, calls: int, path: str = "", **context: Any) -> Any:
    engine = WorkflowEngine(
        registry=RunnableRegistry.from_modules(["workflows.durable"]),
        store=store,
        events_interval=60,
    )
    node = WorkflowNode(run_id=run_id, runnable="durable.metered", path=path, context=context, fresh=True)
    return asyncio.run(engine.start(node, calls))


def _tokens(store: InMemoryRunStore, run_id: str) -> tuple[int, int]:
    record = InMemoryRunStore.get_run(store, run_id)  # not counted
    assert record is not None
    return record.input_tokens, record.output_tokens


def test_a_run_without_a_budget_writes_a_task_s_usage_once_at_its_end() -> None:
    store = CallCountingStore()
    store.create_run(run_id="free", runnable="durable.metered", input=5)

    outcome = _run(store, "free", 5)

    assert isinstance(outcome, Done) and outcome.value == {"counted": 5}
    assert (store.reads, store.usage_writes) == (1, 0)  # one read of the budget; no write per call
    assert _tokens(store, "free") == (50, 10)  # ... but with the loop's result
    _run(store, "free", 2, path="branch/1")  # another task of the run here: its budget is known
    assert (store.reads, store.usage_writes) == (1, 0)
    assert _tokens(store, "free") == (70, 14)


def test_a_budgeted_run_is_read_and_written_at_every_call_and_stops_at_its_budget() -> None:
    store = CallCountingStore()
    store.create_run(run_id="capped", runnable="durable.metered", input=5, token_budget=30)

    with pytest.raises(Exception, match="token budget exceeded"):
        _run(store, "capped", 5)

    assert store.usage_writes == 3  # 12, 24, 36 tokens: the third call passed the budget
    assert _tokens(store, "capped") == (30, 6)
    record = InMemoryRunStore.get_run(store, "capped")
    assert record is not None and record.status == "budget_exceeded"


def test_a_failing_loop_s_usage_is_written_before_its_failure_ends_the_run() -> None:
    store = CallCountingStore()
    store.create_run(run_id="broken", runnable="durable.metered", input=5)

    with pytest.raises(RuntimeError, match="iteration 2 failed"):
        _run(store, "broken", 5, fail_at=2)

    assert store.usage_writes == 1
    assert _tokens(store, "broken") == (30, 6)  # iterations 0, 1 and the failing 2 each made a call
    record = InMemoryRunStore.get_run(store, "broken")
    assert record is not None and record.status == "failed"

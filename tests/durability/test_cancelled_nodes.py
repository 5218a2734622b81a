"""A node of a run cancelled before its task starts builds nothing (no context from its factory,
no runnable) and emits no ``started`` event: it ends as the cancelled run's node, at once."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop import BaseAgentLoop, BaseAgentPipeline, RunCancelledError
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.runtime.engine import WorkflowEngine
from agentloop.orchestration.runtime.next_step import Done
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.wire import WorkflowNode

BUILT: list[str] = []


class Count(BaseAgentLoop):
    max_iterations = 3

    @classmethod
    def create(cls, *, context: Any = None) -> Any:
        BUILT.append(cls.__name__)
        return super().create(context=context)

    def create_initial_state(self, *, input: Any) -> Any:
        return 0

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return state + 1

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return state >= 3

    def build_result(self, *, state: Any) -> Any:
        return state


class Twice(BaseAgentPipeline):
    stages = (Count, Count)

    @classmethod
    def create(cls, *, context: Any = None) -> Any:
        BUILT.append(cls.__name__)
        return super().create(context=context)


def context(spec: Any) -> dict[str, Any]:
    BUILT.append("context")
    return {}


@pytest.mark.parametrize("runnable", ["cancel.count", "cancel.twice"])
async def test_a_node_of_a_cancelled_run_builds_nothing_and_emits_no_started(runnable: str) -> None:
    registry = RunnableRegistry()
    registry.register("cancel.count", Count, context_factory=context)
    registry.register("cancel.twice", Twice, context_factory=context)
    store = InMemoryRunStore()
    store.create_run(run_id="r", runnable=runnable, input=None)
    store.mark_running("r")
    store.request_cancel("r")
    engine = WorkflowEngine(registry=registry, store=store)
    BUILT.clear()

    with pytest.raises(RunCancelledError):  # the task ends as its run did
        await engine.start(WorkflowNode(run_id="r", runnable=runnable, path=""), None)

    assert BUILT == []  # neither the context nor the runnable was built
    assert [event for _, event in store.events("r") if event.get("status") == "started"] == []

    store.create_run(run_id="going", runnable=runnable, input=None)  # the same node, not cancelled
    outcome = await engine.start(WorkflowNode(run_id="going", runnable=runnable, path=""), None)
    assert isinstance(outcome, Done) or runnable == "cancel.twice"  # a pipeline says how it expands
    assert "context" in BUILT and any(e.get("status") == "started" for _, e in store.events("going"))

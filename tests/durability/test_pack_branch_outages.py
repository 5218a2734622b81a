"""A pack's branches on one event loop (``WorkflowEngine.start_pack``): when the run store is away
for one branch, the pack's other branches finish and record their results before the outage is
raised (the pack's next try runs only the rest); a fail-fast failure still stops them at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentloop import BaseAgentLoop, BaseCompositeAgent, Branch
from agentloop.orchestration.errors import StoreUnavailableError
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.runtime.engine import WorkflowEngine
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.wire import WorkflowNode

#: Set by the branch that fails once it is about to: the others wait for it.
FAILING: dict[str, asyncio.Event] = {}


class Branchy(BaseAgentLoop):
    """Input ``"away"``: the store goes away under it; ``"boom"``: it fails; anything else: it
    waits until the failing branch is failing (``"forever"``: never done), then counts to 2."""

    max_iterations = 3

    def create_initial_state(self, *, input: Any) -> dict[str, Any]:
        return {"input": input, "n": 0}

    async def advance_state(self, *, state: dict[str, Any], iteration: int) -> dict[str, Any]:
        failing = FAILING["event"]
        if state["input"] == "away":
            failing.set()
            raise StoreUnavailableError("the run store is away", seconds=30)
        if state["input"] == "boom":
            failing.set()
            raise ValueError("this branch failed")
        await failing.wait()
        if state["input"] == "forever":
            await asyncio.Event().wait()
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: dict[str, Any], iteration: int) -> bool:
        return state["n"] >= 2

    def build_result(self, *, state: dict[str, Any]) -> int:
        return int(state["n"])


class Fan(BaseCompositeAgent):
    branch_runnables = (Branchy,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Branchy, input=value, key=str(k)) for k, value in enumerate(input)]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [result.output for result in results]


def engine_and_nodes(store: InMemoryRunStore, inputs: list[str]) -> tuple[WorkflowEngine, list[WorkflowNode]]:
    registry = RunnableRegistry()
    registry.register("fan", Fan)
    registry.register("branchy", Branchy)
    engine = WorkflowEngine(registry=registry, store=store, checkpoint_interval=0)
    store.create_run(run_id="r", runnable="fan", input=inputs)
    store.mark_running("r")
    root = WorkflowNode(run_id="r", runnable="fan", fresh=True)
    width = len(inputs)
    return engine, [WorkflowEngine.branch_node(root, "branchy", str(k), width, True) for k in range(width)]


async def test_a_store_outage_in_one_branch_lets_the_others_finish_and_record() -> None:
    FAILING["event"] = asyncio.Event()
    store = InMemoryRunStore()
    engine, nodes = engine_and_nodes(store, ["ok", "away", "ok"])

    with pytest.raises(StoreUnavailableError):
        await asyncio.wait_for(engine.start_pack(nodes, ["ok", "away", "ok"]), timeout=20)

    records = [store.loop_record("r", node.path) for node in nodes]
    assert [(record.finished, record.result) for record in records] == [(True, 2), (False, None), (True, 2)]
    assert store.get_run("r").status == "running"  # type: ignore[union-attr]  # the run goes on


async def test_a_fail_fast_failure_in_one_branch_stops_the_others_at_once() -> None:
    FAILING["event"] = asyncio.Event()
    store = InMemoryRunStore()
    engine, nodes = engine_and_nodes(store, ["forever", "boom", "forever"])

    with pytest.raises(Exception) as raised:  # never a hang: the others are cancelled
        await asyncio.wait_for(engine.start_pack(nodes, ["forever", "boom", "forever"]), timeout=20)

    assert not isinstance(raised.value, TimeoutError | StoreUnavailableError), raised.value
    assert [store.loop_record("r", node.path).finished for node in nodes] == [False, False, False]
    assert store.get_run("r").status == "failed"  # type: ignore[union-attr]

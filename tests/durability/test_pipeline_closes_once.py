"""A pipeline's close reports its end once, though a second copy of its launch runs a chain of
stages beside the first (``WorkflowEngine.pipeline_done``)."""

from __future__ import annotations

import asyncio
from typing import Any

from agentloop import BaseAgentLoop, BaseAgentPipeline
from agentloop.orchestration.engine import WorkflowEngine
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.wire import WorkflowNode


class _Counting(BaseAgentLoop):
    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> dict[str, int]:
        return {"n": 0}

    def advance_state(self, *, state: dict[str, int], iteration: int) -> dict[str, int]:
        return {"n": state["n"] + 1}

    def is_complete(self, *, state: dict[str, int], iteration: int) -> bool:
        return state["n"] >= 1

    def build_result(self, *, state: dict[str, int]) -> int:
        return state["n"]


class _TwoCounts(BaseAgentPipeline):
    stages = (_Counting, _Counting)


def test_a_pipeline_is_closed_once_though_a_copy_of_its_launch_runs_a_chain_beside_it() -> None:
    """A second copy of a launch (a producer's retry) runs its own chain of stages, unmarked; its
    close, when the first chain has closed the pipeline, reports no second ``done`` (seen in
    ``test_a_second_copy_of_a_launch_while_its_run_goes_on_runs_nothing_finished_again`` under
    load); the first chain's close always reports it."""
    registry = RunnableRegistry()
    registry.register("two", _TwoCounts)
    store = InMemoryRunStore()
    engine = WorkflowEngine(registry=registry, store=store)
    store.create_run(run_id="r", runnable="two", input=None)
    first = WorkflowNode(run_id="r", runnable="two", fresh=True)
    copy = WorkflowNode(run_id="r", runnable="two", fresh=False)

    async def close_both() -> list[Any]:
        return [await engine.pipeline_done(3, first), await engine.pipeline_done(3, copy)]

    assert [outcome.value for outcome in asyncio.run(close_both())] == [3, 3]
    done = [e for _, e in store.events("r") if e["phase"] == "done"]
    assert [(e["path"], e["status"]) for e in done] == [("", "completed")]

    asyncio.run(engine.pipeline_done(3, first))  # a fresh chain is the only one: it always reports
    assert len([e for _, e in store.events("r") if e["phase"] == "done"]) == 2

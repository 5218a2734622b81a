"""A pipeline's close reports its end once, though a second copy of its launch runs a chain of
stages beside the first (``WorkflowEngine.pipeline_done``)."""

from __future__ import annotations

import asyncio
from typing import Any

from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.runtime.engine import WorkflowEngine
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.wire import WorkflowNode

#: A pipeline of two stages the durability tests run on workers; only its close runs here.
PIPELINE = "durable.waits_then_counts"


def test_a_pipeline_is_closed_once_though_a_copy_of_its_launch_runs_a_chain_beside_it() -> None:
    """A second copy of a launch (a producer's retry) runs its own chain of stages, unmarked; its
    close, when the first chain has closed the pipeline, reports no second ``done`` (seen in
    ``test_a_second_copy_of_a_launch_while_its_run_goes_on_runs_nothing_finished_again`` under
    load); the first chain's close always reports it."""
    registry = RunnableRegistry.from_modules(["workflows.durable"])
    store = InMemoryRunStore()
    engine = WorkflowEngine(registry=registry, store=store)
    store.create_run(run_id="r", runnable=PIPELINE, input=None)
    first = WorkflowNode(run_id="r", runnable=PIPELINE, fresh=True)
    copy = WorkflowNode(run_id="r", runnable=PIPELINE, fresh=False)

    async def close_both() -> list[Any]:
        return [await engine.pipeline_done(3, first), await engine.pipeline_done(3, copy)]

    assert [outcome.value for outcome in asyncio.run(close_both())] == [3, 3]
    done = [e for _, e in store.events("r") if e["phase"] == "done"]
    assert [(e["path"], e["status"]) for e in done] == [("", "completed")]

    asyncio.run(engine.pipeline_done(3, first))  # a fresh chain is the only one: it always reports
    assert len([e for _, e in store.events("r") if e["phase"] == "done"]) == 2

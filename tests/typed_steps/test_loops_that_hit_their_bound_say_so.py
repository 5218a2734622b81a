"""A loop that hits its ``max_iterations`` before it is complete says so: in its last event, to
``build_result``, in the inline ``RunOutcome`` and through the Celery ``RunHandle``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from typed_workflows import CountTo

from agentloop import (
    AgentActionRegistry,
    AiDrivenAgentLoop,
    BaseAgentPipeline,
    InlineAgentRunner,
    ProceduralAgentLoop,
    ProgressEvent,
)
from agentloop.loops.run_outcome import bounded_paths
from agentloop.orchestration.client import CeleryAgentRunner, RunHandle
from agentloop.testing import ScriptedModel, tool_call


async def test_count_to_30_under_a_bound_of_10_does_not_pass_for_finished(
    watch_logs: Callable[..., pytest.LogCaptureFixture],
) -> None:
    logs = watch_logs("agentloop.loops.base")
    events: list[ProgressEvent] = []

    outcome = await InlineAgentRunner.create(runnable=CountTo).request_outcome(
        input=30, on_progress=events.append
    )

    assert outcome.result == {"n": 10, "finished": False}  # build_result read self.stopped_by
    assert (outcome.stopped_by, outcome.bounded, outcome.status) == ("bound", ("",), "succeeded")
    done = events[-1]
    assert (done.phase, done.status, done.data) == ("done", "completed", {"stopped_by": "bound"})
    assert "loop CountTo at (root) stopped at its bound of 10 iterations" in logs.text


async def test_a_finished_loop_says_complete() -> None:
    events: list[ProgressEvent] = []

    outcome = await InlineAgentRunner.create(runnable=CountTo).request_outcome(
        input=3, on_progress=events.append
    )

    assert outcome.result == {"n": 3, "finished": True}
    assert (outcome.stopped_by, outcome.bounded) == ("complete", ())
    assert events[-1].data == {"stopped_by": "complete"}


class Twice(BaseAgentPipeline):
    stages = (CountTo, CountTo)

    def build_stage_input(self, *, index: int, previous_output: Any, input: Any) -> Any:
        return input[index]


async def test_in_a_pipeline_the_outcome_names_the_loops_that_hit_their_bound() -> None:
    outcome = await InlineAgentRunner.create(runnable=Twice).request_outcome(input=[2, 40])

    assert outcome.result == {"n": 10, "finished": False}
    assert (outcome.stopped_by, outcome.bounded) == ("bound", ("pipeline/1",))


class Forever(ProceduralAgentLoop):
    max_iterations = 2

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {"result": None, "tries": iteration + 1}

    def build_bounded_result(self, *, state: Any) -> Any:
        return {"gave_up_after": state["tries"], "stopped_by": self.stopped_by}


class Chatty(AiDrivenAgentLoop):
    max_iterations = 1
    registry = AgentActionRegistry()


async def test_procedural_and_ai_driven_loops_say_it_the_same_way() -> None:
    procedural = await InlineAgentRunner.create(runnable=Forever).request_outcome(input=None)
    model = ScriptedModel([tool_call("finish", "not json")])
    ai = await InlineAgentRunner.create(runnable=Chatty, context={"processor": model}).request_outcome(
        input="hi"
    )

    assert (procedural.result, procedural.stopped_by) == (
        {"gave_up_after": 2, "stopped_by": "bound"},
        "bound",
    )
    assert (ai.result["stopped_by"], ai.stopped_by) == ("bound", "bound")


def test_bounded_paths_reads_a_runs_stored_events() -> None:
    events = [
        {"phase": "done", "path": "pipeline/0", "data": {"stopped_by": "complete"}},
        {"phase": "done", "path": "pipeline/1", "data": {"stopped_by": "bound"}},
        {"phase": "done", "path": "pipeline/1", "data": {"stopped_by": "bound"}},
        {"phase": "done", "path": "", "data": {}},
    ]

    assert bounded_paths(events) == ("pipeline/1",)


@pytest.mark.parametrize(("goal", "stopped_by", "finished"), [(30, "bound", False), (4, "complete", True)])
def test_on_celery_the_run_handle_says_how_the_run_stopped(
    typed_celery: Any, goal: int, stopped_by: str, finished: bool
) -> None:
    app, store = typed_celery
    handle = CeleryAgentRunner.create(runnable=CountTo, app=app, store=store).request_sync(input=goal)

    assert handle.wait_sync(timeout=30) == {"n": min(goal, 10), "finished": finished}
    assert handle.stopped_by == stopped_by
    assert handle.bounded == (("",) if stopped_by == "bound" else ())
    assert RunHandle(app=app, run_id=handle.run_id).stopped_by == stopped_by  # through agentloop.progress

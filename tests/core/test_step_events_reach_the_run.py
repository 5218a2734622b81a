"""A step reports what it observes (a cache hit, streamed output) with ``report_step_event``; the
run scope takes it to ``on_progress`` as a ``progress`` event at the step's path, in a composite's
branch too. Outside a run the report goes nowhere, and a failing sink never fails the step."""

from __future__ import annotations

from typing import Any

from agentloop.actions import StepEvent, report_step_event, step_events_wanted, use_step_events
from agentloop.loops import BaseAgentLoop, InlineAgentRunner
from agentloop.pipelines import BaseCompositeAgent, Branch
from agentloop.testing import ProgressRecorder


class Observe(BaseAgentLoop):
    """One iteration that reports one step event carrying its input."""

    max_iterations = 1

    def create_initial_state(self, *, input: Any) -> Any:
        return {"input": input, "heard": None}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        await report_step_event(
            action="lookup", phase="cache_hit", message="served from cache", data={"key": state["input"]}
        )
        return {**state, "heard": step_events_wanted()}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return state["heard"] is not None

    def build_result(self, *, state: Any) -> Any:
        return state["heard"]


class Fan(BaseCompositeAgent):
    branch_runnables = (Observe,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Observe, input=item, key=item) for item in input]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [result.output for result in results]


async def test_a_step_event_becomes_a_progress_event_at_the_steps_path() -> None:
    recorder = ProgressRecorder()

    result = await InlineAgentRunner.create(runnable=Observe, context={}).request(
        input="k1", on_progress=recorder, run_id="run-1"
    )

    assert result is True  # a sink was listening
    hits = [event for event in recorder.events if event.phase == "cache_hit"]
    assert len(hits) == 1
    hit = hits[0]
    assert (hit.run_id, hit.path, hit.runnable, str(hit.status)) == ("run-1", "", "lookup", "progress")
    assert hit.message == "served from cache" and dict(hit.data) == {"key": "k1"}


async def test_each_branch_reports_at_its_own_path() -> None:
    recorder = ProgressRecorder()

    await InlineAgentRunner.create(runnable=Fan, context={}).request(input=["a", "b"], on_progress=recorder)

    hits = {event.path: event.data["key"] for event in recorder.events if event.phase == "cache_hit"}
    assert hits == {"branch/a": "a", "branch/b": "b"}


async def test_outside_a_run_a_report_goes_nowhere() -> None:
    assert not step_events_wanted()
    await report_step_event(action="lookup", phase="cache_hit")  # no sink: nothing to fail


class Broken:
    def step_event(self, event: StepEvent) -> None:
        raise RuntimeError("sink down")


class Keep:
    def __init__(self) -> None:
        self.events: list[StepEvent] = []

    async def step_event(self, event: StepEvent) -> None:
        self.events.append(event)


async def test_a_failing_sink_is_logged_not_raised(caplog: Any) -> None:
    with use_step_events(Broken(), path="stage/1"):
        await report_step_event(action="lookup", phase="delta", data={"text": "par"})
    assert "step event sink failed for delta at 'stage/1'" in caplog.text


async def test_the_sink_hears_the_blocks_path() -> None:
    keep = Keep()
    with use_step_events(keep, path="branch/x"):
        await report_step_event(action="summarise", phase="delta", message="", data={"text": "He"})
    assert keep.events == [StepEvent(action="summarise", phase="delta", data={"text": "He"}, path="branch/x")]


async def test_a_run_nobody_listens_to_builds_no_step_events() -> None:
    result = await InlineAgentRunner.create(runnable=Observe, context={}).request(input="k1")

    assert result is False  # step_events_wanted() was false inside the step

"""``InlineAgentRunner``: in-process runs, cancellation and a whole-run deadline that reach every level."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import timedelta
from typing import Any

import pytest

from agentloop.actions import AiResponse, RunCancelledError, RunDeadlineExceededError, RunStoppedError
from agentloop.loops import (
    AiDrivenAgentLoop,
    CancellationToken,
    InlineAgentRunner,
    ProceduralAgentLoop,
    ProgressEvent,
    current_scope,
)
from agentloop.pipelines import BaseAgentPipeline, BaseCompositeAgent, Branch
from agentloop.testing import ProgressRecorder


class Double(ProceduralAgentLoop):
    def create_initial_state(self, *, input: Any) -> Any:
        return {"result": None, "input": input}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "result": state["input"] * 2}


async def test_a_runner_runs_a_runnable_and_returns_its_result(progress_recorder: ProgressRecorder) -> None:
    runner = InlineAgentRunner.create(runnable=Double, context={"unused": True})

    assert await runner.request(input=21, on_progress=progress_recorder, run_id="run-7") == 42
    assert {event.run_id for event in progress_recorder.events} == {"run-7"}
    assert progress_recorder.statuses() == ["started", "progress", "completed"]


def test_the_sync_form_runs_the_same_request_without_an_event_loop() -> None:
    recorder = ProgressRecorder()

    assert (
        InlineAgentRunner.create(runnable=Double).request_sync(input=4, on_progress=recorder, run_id="r") == 8
    )
    assert recorder.transcript() == {
        "": [
            ("Double", "start", "started", 0, 4, "", {}),
            ("Double", "iteration", "progress", 1, 4, "iteration 1 of at most 4", {}),
            ("Double", "done", "completed", 1, 4, "complete", {"stopped_by": "complete"}),
        ]
    }


async def test_each_run_gets_a_fresh_run_id_unless_given_one(progress_recorder: ProgressRecorder) -> None:
    runner = InlineAgentRunner.create(runnable=Double)
    await runner.request(input=1, on_progress=progress_recorder)
    await runner.request(input=1, on_progress=progress_recorder)

    run_ids = list(dict.fromkeys(event.run_id for event in progress_recorder.events))
    assert len(run_ids) == 2
    assert all(re.fullmatch(r"[0-9a-f]{32}", run_id) for run_id in run_ids)


async def test_a_run_can_start_below_a_path(progress_recorder: ProgressRecorder) -> None:
    await InlineAgentRunner.create(runnable=Double).request(
        input=1, on_progress=progress_recorder, path="batch/3"
    )

    assert progress_recorder.paths == ["batch/3"]


async def test_the_run_scope_exists_only_inside_a_run() -> None:
    seen: list[Any] = []

    class Peek(Double):
        def advance_state(self, *, state: Any, iteration: int) -> Any:
            seen.append(current_scope())
            return super().advance_state(state=state, iteration=iteration)

    await InlineAgentRunner.create(runnable=Peek).request(input=1, run_id="scoped")

    assert [scope.run_id for scope in seen] == ["scoped"]
    assert current_scope() is None


# ----- progress is observation --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_progress_callback_that_raises_never_fails_the_run(kind: str) -> None:
    calls: list[str] = []

    def broken(event: ProgressEvent) -> None:
        calls.append(event.phase)
        raise RuntimeError("dashboard is down")

    async def broken_async(event: ProgressEvent) -> None:
        broken(event)

    callback = broken if kind == "sync" else broken_async

    assert await InlineAgentRunner.create(runnable=Double).request(input=5, on_progress=callback) == 10
    assert calls == ["start", "iteration", "done"]


async def test_an_async_progress_callback_is_awaited_for_every_event() -> None:
    received: list[str] = []

    async def on_progress(event: ProgressEvent) -> None:
        await asyncio.sleep(0)
        received.append(f"{event.path}:{event.phase}")

    await InlineAgentRunner.create(runnable=Double).request(input=1, on_progress=on_progress)

    assert received == [":start", ":iteration", ":done"]


# ----- cancellation -------------------------------------------------------------------------------


class Step(ProceduralAgentLoop):
    """Works in small sleeps; the branch whose input is ``"cancel"`` cancels the run from inside."""

    max_iterations = 50

    def create_initial_state(self, *, input: Any) -> Any:
        return {"result": None, "input": input}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        if state["input"] == "cancel":
            self.context["token"].cancel("user pressed stop")
            return state
        await asyncio.sleep(0.01)
        return state


class Spread(BaseCompositeAgent):
    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Step, input=value, key=str(key)) for key, value in enumerate(input)]


class Prepare(ProceduralAgentLoop):
    def create_initial_state(self, *, input: Any) -> Any:
        return {"result": None, "input": input}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "result": state["input"]}


class Workflow(BaseAgentPipeline):
    stages = (Prepare, Spread)


async def test_cancelling_from_inside_a_nested_branch_ends_the_run_as_cancelled_at_that_path() -> None:
    token = CancellationToken()
    recorder = ProgressRecorder()
    runner = InlineAgentRunner.create(runnable=Workflow, context={"token": token})

    with pytest.raises(RunCancelledError) as caught:
        await runner.request(
            input=["work", "work", "work", "cancel"], on_progress=recorder, cancel=token, run_id="r1"
        )

    assert (caught.value.status, caught.value.path, str(caught.value)) == (
        "cancelled",
        "pipeline/1/branch/3",
        "run r1 was cancelled",
    )
    assert token.reason == "user pressed stop"
    transcript = recorder.transcript()
    assert transcript["pipeline/1/branch/3"] == [
        ("Step", "start", "started", 0, 50, "", {}),
        ("Step", "iteration", "progress", 1, 50, "iteration 1 of at most 50", {}),
        ("Step", "cancelled", "failed", 1, 50, "run r1 was cancelled", {}),
    ]
    for path, events in transcript.items():
        if path != "pipeline/0":
            assert events[-1][1:3] == ("cancelled", "failed"), path
            assert events[-1][3] < Step.max_iterations, path  # stopped, not run to its bound
    assert transcript[""][-1] == (
        "Workflow",
        "cancelled",
        "failed",
        1,
        2,
        "stage 1 failed: RunCancelledError: run r1 was cancelled",
        {},
    )


async def test_a_run_cancelled_before_it_starts_runs_no_step(progress_recorder: ProgressRecorder) -> None:
    token = CancellationToken()
    token.cancel()

    with pytest.raises(RunCancelledError):
        await InlineAgentRunner.create(runnable=Double).request(
            input=1, cancel=token, on_progress=progress_recorder
        )

    assert [(e.phase, str(e.status)) for e in progress_recorder.events] == [
        ("start", "started"),
        ("cancelled", "failed"),
    ]


def test_any_object_with_is_cancelled_can_cancel_a_run() -> None:
    class Flag:
        def is_cancelled(self) -> bool:
            return True

    with pytest.raises(RunCancelledError):
        InlineAgentRunner.create(runnable=Double).request_sync(input=1, cancel=Flag())


# ----- the whole-run deadline ---------------------------------------------------------------------


async def test_a_deadline_reaches_every_nested_runnable_and_ends_the_run_on_time() -> None:
    recorder = ProgressRecorder()
    deadlines: list[float | None] = []

    def note_the_deadline(event: ProgressEvent) -> None:
        scope = current_scope()
        deadlines.append(scope.deadline if scope else None)
        recorder(event)

    runner = InlineAgentRunner.create(runnable=Workflow, context={"token": CancellationToken()})

    # each branch needs 50 sleeps of 10 ms: only the deadline can end the run before they finish
    with pytest.raises(RunDeadlineExceededError) as caught:
        await runner.request(
            input=["work"] * 3, on_progress=note_the_deadline, deadline=timedelta(seconds=0.15)
        )
    ended_at = time.monotonic()

    [deadline] = set(deadlines)  # one deadline for the run, seen at every level
    assert deadline is not None and ended_at >= deadline  # it ended the run, and not before its time
    assert caught.value.status == "deadline_exceeded"
    assert isinstance(caught.value, RunStoppedError)
    transcript = recorder.transcript()
    assert set(transcript) == {
        "",
        "pipeline/0",
        "pipeline/1",
        "pipeline/1/branch/0",
        "pipeline/1/branch/1",
        "pipeline/1/branch/2",
    }
    for path in ("", "pipeline/1", "pipeline/1/branch/0", "pipeline/1/branch/1", "pipeline/1/branch/2"):
        assert transcript[path][-1][1:3] == ("deadline_exceeded", "failed"), path
    assert transcript["pipeline/0"][-1][1:3] == ("done", "completed")


async def test_a_deadline_is_checked_between_iterations_of_a_nested_loop() -> None:
    class Blocking(ProceduralAgentLoop):
        max_iterations = 100

        def advance_state(self, *, state: Any, iteration: int) -> Any:
            time.sleep(0.02)  # a step that never yields to the event loop
            return state

    class Wrapped(BaseAgentPipeline):
        stages = (Blocking,)

    with pytest.raises(RunDeadlineExceededError) as caught:
        await InlineAgentRunner.create(runnable=Wrapped).request(input=None, deadline=timedelta(seconds=0.1))

    assert caught.value.path == "pipeline/0"


async def test_a_deadline_ends_a_step_that_hangs_forever_in_a_model_call(function_model: Any) -> None:
    async def hang(request: Any) -> AiResponse:
        await asyncio.sleep(60)  # a broken deadline lets this end, and the test fails on its error
        raise AssertionError("the deadline did not end the model call")

    recorder = ProgressRecorder()

    with pytest.raises(RunDeadlineExceededError, match=r"passed its deadline of 0\.2s"):
        await InlineAgentRunner.create(
            runnable=AiDrivenAgentLoop, context={"processor": function_model(hang)}
        ).request(input="hello", on_progress=recorder, deadline=timedelta(seconds=0.2))

    assert [(e.phase, str(e.status)) for e in recorder.events] == [
        ("start", "started"),
        ("deadline_exceeded", "failed"),
    ]


async def test_a_run_that_finishes_before_its_deadline_is_unaffected() -> None:
    runner = InlineAgentRunner.create(runnable=Double)

    assert await runner.request(input=3, deadline=timedelta(seconds=5)) == 6

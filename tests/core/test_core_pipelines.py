"""``BaseAgentPipeline`` and ``BaseActionStage``: stages in order, any runnable as a stage."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop.actions import BaseAgentAction
from agentloop.loops import InlineAgentRunner, ProceduralAgentLoop
from agentloop.pipelines import BaseActionStage, BaseAgentPipeline, BaseCompositeAgent, Branch
from agentloop.testing import ProgressRecorder


class Append(ProceduralAgentLoop):
    """A one-step loop: appends ``letter`` to the list it is given."""

    letter = "?"

    def create_initial_state(self, *, input: Any) -> Any:
        return {"result": None, "input": input}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "result": [*state["input"], self.letter]}


class AppendA(Append):
    letter = "a"


class AppendB(Append):
    letter = "b"


class AppendC(Append):
    letter = "c"


class Broken(ProceduralAgentLoop):
    def advance_state(self, *, state: Any, iteration: int) -> Any:
        raise LookupError("no such record")


class ABC(BaseAgentPipeline):
    stages = (AppendA, AppendB, AppendC)


async def run(
    runnable: type[Any], input: Any, recorder: ProgressRecorder | None = None, context: Any = None
) -> Any:
    return await InlineAgentRunner.create(runnable=runnable, context=context).request(
        input=input, on_progress=recorder
    )


def loop_events(name: str) -> list[tuple[Any, ...]]:
    """The transcript of one ``Append`` loop: started, one iteration, completed."""
    return [
        (name, "start", "started", 0, 4, "", {}),
        (name, "iteration", "progress", 1, 4, "iteration 1 of at most 4", {}),
        (name, "done", "completed", 1, 4, "complete", {"stopped_by": "complete"}),
    ]


# ----- stages in order ----------------------------------------------------------------------------


async def test_a_pipeline_runs_its_stages_in_order_feeding_each_the_previous_output(
    progress_recorder: ProgressRecorder,
) -> None:
    assert await run(ABC, [], progress_recorder) == ["a", "b", "c"]

    assert progress_recorder.transcript() == {
        "": [
            ("ABC", "start", "started", 0, 3, "0 of 3 stages done", {}),
            ("ABC", "stage", "progress", 1, 3, "1 of 3 stages done", {}),
            ("ABC", "stage", "progress", 2, 3, "2 of 3 stages done", {}),
            ("ABC", "stage", "progress", 3, 3, "3 of 3 stages done", {}),
            ("ABC", "done", "completed", 3, 3, "3 of 3 stages done", {}),
        ],
        "pipeline/0": loop_events("AppendA"),
        "pipeline/1": loop_events("AppendB"),
        "pipeline/2": loop_events("AppendC"),
    }
    assert progress_recorder.paths == ["", "pipeline/0", "pipeline/1", "pipeline/2"]


async def test_build_stage_input_shapes_each_stages_input_from_index_previous_output_and_input() -> None:
    seen: list[tuple[int, Any, Any]] = []

    class Reshaping(ABC):
        def build_stage_input(self, *, index: int, previous_output: Any, input: Any) -> Any:
            seen.append((index, previous_output, input))
            return [*previous_output, str(index)] if index else input["start"]

    assert await run(Reshaping, {"start": ["s"]}) == ["s", "a", "1", "b", "2", "c"]
    assert seen == [
        (0, {"start": ["s"]}, {"start": ["s"]}),
        (1, ["s", "a"], {"start": ["s"]}),
        (2, ["s", "a", "1", "b"], {"start": ["s"]}),
    ]


async def test_build_stage_input_may_be_async() -> None:
    class AsyncReshaping(ABC):
        async def build_stage_input(self, *, index: int, previous_output: Any, input: Any) -> Any:
            return [*previous_output, "+"]

    assert await run(AsyncReshaping, []) == ["+", "a", "+", "b", "+", "c"]


async def test_a_pipeline_without_stages_returns_its_input() -> None:
    assert await run(BaseAgentPipeline, {"x": 1}) == {"x": 1}


async def test_a_failing_stage_stops_the_pipeline_and_is_reported_at_both_levels(
    progress_recorder: ProgressRecorder,
) -> None:
    class Halts(BaseAgentPipeline):
        stages = (AppendA, Broken, AppendC)

    with pytest.raises(LookupError, match="no such record"):
        await run(Halts, [], progress_recorder)

    transcript = progress_recorder.transcript()
    assert "pipeline/2" not in transcript
    assert transcript[""][-1] == (
        "Halts",
        "error",
        "failed",
        1,
        3,
        "stage 1 failed: LookupError: no such record",
        {},
    )
    assert transcript["pipeline/1"][-1][1:3] == ("error", "failed")


async def test_a_pipeline_keeps_the_runnable_contract(agentloop_contract: Any) -> None:
    report = await agentloop_contract.check_runnable(ABC, input=["x"])

    assert report.result == ["x", "a", "b", "c"]


# ----- nesting both ways --------------------------------------------------------------------------


class Fan(BaseCompositeAgent):
    """One branch per letter stage, keyed 1..3; merges to the branch outputs in order."""

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [
            Branch(runnable=stage, input=input, key=str(key))
            for key, stage in enumerate((AppendA, AppendB, AppendC), start=1)
        ]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [result.output for result in results]


class Flatten(ProceduralAgentLoop):
    def create_initial_state(self, *, input: Any) -> Any:
        return {"result": None, "input": input}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "result": [item for part in state["input"] for item in part]}


class PipelineWithComposite(BaseAgentPipeline):
    stages = (AppendA, Fan, Flatten)


class CompositeOfPipelines(BaseCompositeAgent):
    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=ABC, input=[key], key=key) for key in input]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return {result.key: result.output for result in results}


class CompositeOfComposites(BaseCompositeAgent):
    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Fan, input=[n], key=f"outer{n}") for n in range(2)]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [result.output for result in results]


async def test_a_composite_can_be_a_stage_of_a_pipeline(progress_recorder: ProgressRecorder) -> None:
    result = await run(PipelineWithComposite, ["in"], progress_recorder)

    assert result == ["in", "a", "a", "in", "a", "b", "in", "a", "c"]
    assert progress_recorder.transcript()["pipeline/1/branch/3"] == loop_events("AppendC")
    assert set(progress_recorder.transcript()) == {
        "",
        "pipeline/0",
        "pipeline/1",
        "pipeline/1/branch/1",
        "pipeline/1/branch/2",
        "pipeline/1/branch/3",
        "pipeline/2",
    }


async def test_a_pipeline_can_be_a_branch_of_a_composite(progress_recorder: ProgressRecorder) -> None:
    result = await run(CompositeOfPipelines, ["x", "y"], progress_recorder)

    assert result == {"x": ["x", "a", "b", "c"], "y": ["y", "a", "b", "c"]}
    assert progress_recorder.transcript()["branch/y/pipeline/2"] == loop_events("AppendC")
    assert progress_recorder.transcript()["branch/y"][-1] == (
        "ABC",
        "done",
        "completed",
        3,
        3,
        "3 of 3 stages done",
        {},
    )


async def test_a_composite_can_be_a_branch_of_a_composite(progress_recorder: ProgressRecorder) -> None:
    result = await run(CompositeOfComposites, None, progress_recorder)

    assert result == [[[0, "a"], [0, "b"], [0, "c"]], [[1, "a"], [1, "b"], [1, "c"]]]
    assert {path for path in progress_recorder.transcript() if path.count("/") == 3} == {
        f"branch/outer{n}/branch/{k}" for n in range(2) for k in (1, 2, 3)
    }


@pytest.mark.parametrize("runnable", [PipelineWithComposite, CompositeOfPipelines, CompositeOfComposites])
async def test_every_nested_shape_keeps_the_runnable_contract(
    runnable: type[Any], agentloop_contract: Any
) -> None:
    await agentloop_contract.check_runnable(runnable, input=["k"])


# ----- an action as a stage -----------------------------------------------------------------------


class Greet(BaseAgentAction):
    name = "greet"
    description = "Greets someone."

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        return {"greeting": f"{context['salutation']}, {arguments.get('name', arguments.get('input'))}"}


class GreetStage(BaseActionStage):
    action = Greet


async def test_an_action_stage_runs_its_action_on_the_input_with_the_stages_context(
    progress_recorder: ProgressRecorder,
) -> None:
    result = await run(GreetStage, {"name": "Ada"}, progress_recorder, context={"salutation": "Hello"})

    assert result == {"greeting": "Hello, Ada"}
    assert progress_recorder.transcript() == {
        "": [
            ("GreetStage", "start", "started", 0, 1, "action greet", {}),
            ("GreetStage", "done", "completed", 1, 1, "action greet", {}),
        ]
    }


async def test_an_action_stage_passes_a_non_object_input_as_the_input_argument() -> None:
    assert await run(GreetStage, "Grace", context={"salutation": "Hi"}) == {"greeting": "Hi, Grace"}


async def test_an_action_stage_can_shape_its_arguments_and_result() -> None:
    class Shaped(GreetStage):
        def build_arguments(self, *, input: Any) -> dict[str, Any]:
            return {"name": input.upper()}

        async def build_result(self, *, value: Any, input: Any) -> Any:
            return [input, value["greeting"]]

    assert await run(Shaped, "ada", context={"salutation": "Hi"}) == ["ada", "Hi, ADA"]


async def test_a_failing_action_stage_reports_failed_and_raises(progress_recorder: ProgressRecorder) -> None:
    with pytest.raises(TypeError):
        await run(GreetStage, {"name": "Ada"}, progress_recorder, context=None)

    assert progress_recorder.statuses() == ["started", "failed"]
    assert progress_recorder.events[-1].phase == "error"


async def test_an_action_stage_works_as_a_pipeline_stage(agentloop_contract: Any) -> None:
    class GreetThenAppend(BaseAgentPipeline):
        stages = (GreetStage, AppendA)

        def build_stage_input(self, *, index: int, previous_output: Any, input: Any) -> Any:
            return [previous_output["greeting"]] if index else previous_output

    report = await agentloop_contract.check_runnable(
        GreetThenAppend, input={"name": "Ada"}, context={"salutation": "Hey"}
    )

    assert report.result == ["Hey, Ada", "a"]

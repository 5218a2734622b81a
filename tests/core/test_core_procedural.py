"""``ProceduralAgentLoop``: the procedure is code, written in ``advance_state``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from agentloop.actions import AgentActionRegistry, BaseAgentAction
from agentloop.loops import BaseAgentLoop, InlineAgentRunner, ProceduralAgentLoop
from agentloop.testing import ProgressRecorder


class Shout(BaseAgentAction):
    name = "shout"
    description = "Upper-cases its text."

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        return str(arguments["text"]).upper()


class ShoutLoop(ProceduralAgentLoop):
    """A one-step procedure that reports inside its step and performs one action."""

    registry = AgentActionRegistry.create(actions=[Shout()])

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        await self.notify_progress(phase="shouting", status="progress", message="about to shout", step=1)
        return {**state, "result": await self.perform_action(name="shout", arguments={"text": "hi"})}


def test_a_procedural_loop_starts_empty_runs_once_and_returns_its_result() -> None:
    loop = ShoutLoop.create(context=None)

    assert loop.create_initial_state(input="anything") == {"result": None}
    assert loop.is_complete(state={"result": None}, iteration=0) is False
    assert loop.is_complete(state={"result": 0}, iteration=0) is True
    assert loop.build_result(state={"result": "x"}) == "x"
    assert loop.max_iterations == 4
    assert isinstance(loop, BaseAgentLoop)


async def test_a_procedural_loop_is_usually_one_iteration(agentloop_contract: Any) -> None:
    report = await agentloop_contract.check_loop(ShoutLoop, input={"x": 1}, context={})

    assert report.result == "HI"
    assert report.advance_calls == 1
    assert report.states == [{"result": "HI"}]


def test_notify_progress_goes_through_a_mapping_context() -> None:
    notes: list[dict[str, Any]] = []
    context = {"notify_progress": lambda **note: notes.append(note)}

    assert InlineAgentRunner.create(runnable=ShoutLoop, context=context).request_sync(input=None) == "HI"
    assert notes == [{"phase": "shouting", "status": "progress", "message": "about to shout", "step": 1}]


async def test_notify_progress_goes_through_an_attribute_context_and_may_be_async() -> None:
    notes: list[dict[str, Any]] = []

    async def notify_progress(**note: Any) -> None:
        notes.append(note)

    context = SimpleNamespace(notify_progress=notify_progress)

    assert await InlineAgentRunner.create(runnable=ShoutLoop, context=context).request(input=None) == "HI"
    assert notes == [{"phase": "shouting", "status": "progress", "message": "about to shout", "step": 1}]


@pytest.mark.parametrize("context", [None, {}, SimpleNamespace()], ids=["no context", "dict", "object"])
async def test_notify_progress_is_a_no_op_without_a_notifier(context: Any) -> None:
    assert await InlineAgentRunner.create(runnable=ShoutLoop, context=context).request(input=None) == "HI"


async def test_a_procedure_that_never_sets_a_result_stops_at_its_bound(
    progress_recorder: ProgressRecorder,
) -> None:
    class Undecided(ProceduralAgentLoop):
        max_iterations = 2

        def advance_state(self, *, state: Any, iteration: int) -> Any:
            return {"result": None, "tries": iteration + 1}

    result = await InlineAgentRunner.create(runnable=Undecided).request(
        input=None, on_progress=progress_recorder
    )

    assert result is None
    assert progress_recorder.transcript()[""][-1] == (
        "Undecided",
        "done",
        "completed",
        2,
        2,
        "hit the iteration bound",
        {"stopped_by": "bound"},
    )


def test_a_procedural_loop_without_a_procedure_cannot_be_created() -> None:
    with pytest.raises(TypeError):
        ProceduralAgentLoop.create(context=None)

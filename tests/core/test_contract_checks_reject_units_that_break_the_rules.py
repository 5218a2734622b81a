"""``check_runnable``, ``check_loop`` and ``check_action``: each names the rule a unit breaks."""

from __future__ import annotations

from typing import Any

import pytest
from kit_support import an_event

from agentloop.actions import BaseAgentAction
from agentloop.loops import ProceduralAgentLoop, ProgressStatus, current_scope, use_scope
from agentloop.loops.contract import RunnableBase
from agentloop.loops.scope import ensure_scope
from agentloop.testing import (
    assert_event_contract,
    assert_runnable_shape,
    check_action,
    check_loop,
    check_runnable,
)


class Emits(RunnableBase):
    """A hand-written runnable: emits the scripted statuses, returns ``result``."""

    statuses: tuple[str, ...] = ("started", "completed")
    result: Any = "ok"
    iteration = 0

    async def run(self, *, input: Any, on_progress: Any = None) -> Any:
        with ensure_scope() as scope:
            for status in self.statuses:
                event = self.make_event(
                    scope=scope,
                    iteration=self.iteration,
                    max_iterations=1,
                    phase="p",
                    status=ProgressStatus(status),
                )
                await self.emit_progress(event=event, on_progress=on_progress)
        return self.result


def emits(**attributes: Any) -> type[Emits]:
    return type("Emits", (Emits,), attributes)


async def test_check_runnable_accepts_a_hand_written_runnable_that_keeps_the_contract(
    agentloop_contract: Any,
) -> None:
    report = await agentloop_contract.check_runnable(
        emits(statuses=("started", "progress", "completed")), input=None
    )

    assert report.result == "ok"
    assert [str(e.status) for e in report.events] == ["started", "progress", "completed"]


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ({1, 2}, "Emits's result is not JSON-serialisable: Object of type set is not JSON serializable"),
        (object(), "Emits's result is not JSON-serialisable"),
        (float("nan"), "Emits's result is not JSON-serialisable: Out of range float values"),
        ((1, 2), r"Emits's result changes in a JSON round trip \(tuples\? non-str keys\?\)"),
        ({1: "a"}, r"Emits's result changes in a JSON round trip"),
    ],
    ids=["set", "object", "nan", "tuple", "int keys"],
)
async def test_check_runnable_rejects_a_result_that_is_not_plain_json(result: Any, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        await check_runnable(emits(result=result), input=None)


@pytest.mark.parametrize(
    ("statuses", "message"),
    [
        (("progress", "completed"), r"'' does not start with 'started'"),
        (("started", "progress"), r"'' does not end with 'completed' or 'failed'"),
        (("started", "completed", "progress", "completed"), r"'' is out of order"),
        (("started", "started", "completed"), r"'' is out of order"),
        ((), "the run emitted no progress events"),
    ],
)
async def test_check_runnable_rejects_events_out_of_order(statuses: tuple[str, ...], message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        await check_runnable(emits(statuses=statuses), input=None)


async def test_check_runnable_rejects_an_iteration_past_the_bound() -> None:
    with pytest.raises(AssertionError, match=r"Emits at '': iteration 2 exceeds bound 1"):
        await check_runnable(emits(iteration=2), input=None)


async def test_check_runnable_rejects_a_run_that_is_not_async() -> None:
    class SyncRun(RunnableBase):
        def run(self, *, input: Any, on_progress: Any = None) -> Any:
            return input

    with pytest.raises(AssertionError, match=r"SyncRun\.run must be async"):
        await check_runnable(SyncRun, input=None)


def test_the_shape_check_wants_a_classmethod_factory_and_keyword_only_arguments() -> None:
    class NoFactory:
        def create(self, *, context: Any = None) -> Any:
            return self

        async def run(self, *, input: Any, on_progress: Any = None) -> Any:
            return input

    class PositionalInput(RunnableBase):
        async def run(self, input: Any, on_progress: Any = None) -> Any:
            return input

    class PositionalContext(RunnableBase):
        @classmethod
        def create(cls, context: Any = None) -> Any:  # type: ignore[override]
            return cls(context=context)

        async def run(self, *, input: Any, on_progress: Any = None) -> Any:
            return input

    with pytest.raises(AssertionError, match=r"NoFactory\.create must be a classmethod"):
        assert_runnable_shape(NoFactory)
    with pytest.raises(AssertionError, match=r"PositionalInput\.run must take keyword-only input"):
        assert_runnable_shape(PositionalInput)
    with pytest.raises(AssertionError, match=r"PositionalContext\.create must take keyword-only context"):
        assert_runnable_shape(PositionalContext)


async def test_check_loop_rejects_a_loop_that_mutates_its_state() -> None:
    class Appends(ProceduralAgentLoop):
        def create_initial_state(self, *, input: Any) -> Any:
            return {"result": None, "seen": []}

        def advance_state(self, *, state: Any, iteration: int) -> Any:
            state["seen"].append(iteration)
            return {**state, "result": "done"}

    with pytest.raises(AssertionError, match=r"Appends\.advance_state mutated the state in place"):
        await check_loop(Appends, input=None)


async def test_check_loop_rejects_state_that_json_cannot_carry_unless_told_otherwise() -> None:
    class Tuples(ProceduralAgentLoop):
        def advance_state(self, *, state: Any, iteration: int) -> Any:
            return {"result": ("a", "b")}

        def build_result(self, *, state: Any) -> Any:
            return list(state["result"])

    with pytest.raises(AssertionError, match=r"state after iteration 1 changes in a JSON round trip"):
        await check_loop(Tuples, input=None)
    assert (await check_loop(Tuples, input=None, json_state=False)).result == ["a", "b"]


class Echo(BaseAgentAction):
    name = "echo"
    description = "Echoes."

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        return arguments.get("value")


async def test_check_action_rejects_actions_that_break_the_contract() -> None:
    class Nameless(Echo):
        name = ""

    class ArraySchema(Echo):
        @property
        def parameters(self) -> dict[str, Any]:
            return {"type": "array"}

    class SyncRun(Echo):
        def run(self, *, arguments: dict[str, Any], context: Any) -> Any:  # type: ignore[override]
            return None

    with pytest.raises(AssertionError, match="Nameless has no name"):
        await check_action(Nameless(), arguments={})
    with pytest.raises(AssertionError, match="echo: parameters must be an object schema"):
        await check_action(ArraySchema(), arguments={})
    with pytest.raises(AssertionError, match=r"echo\.run must be async"):
        await check_action(SyncRun(), arguments={})
    with pytest.raises(AssertionError, match="echo's value changes in a JSON round trip"):
        await check_action(Echo(), arguments={"value": ("a",)})
    with pytest.raises(AssertionError, match="echo's value is not JSON-serialisable"):
        await check_action(Echo(), arguments={"value": {1j}})
    assert await check_action(Echo(), arguments={"value": [1]}) == [1]


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"type": "object", "properties": {"q": {"type": "str"}}},
            r"echo's parameters is not a valid JSON Schema: 'str' is not valid under any of the given "
            r"schemas at schema\['properties'\]\['q'\]\['type'\]",
        ),
        (
            {"type": "object", "required": "q"},
            r"echo's parameters is not a valid JSON Schema: 'q' is not of type 'array' "
            r"at schema\['required'\]",
        ),
    ],
    ids=["unknown type name", "required not a list"],
)
async def test_check_action_rejects_parameters_that_are_not_a_valid_json_schema(
    parameters: dict[str, Any], message: str
) -> None:
    class Broken(Echo):
        @property
        def parameters(self) -> dict[str, Any]:
            return parameters

    with pytest.raises(AssertionError, match=message):
        await check_action(Broken(), arguments={})


def test_assert_event_contract_checks_each_path_on_its_own() -> None:
    interleaved = [
        an_event("", "start", "started"),
        an_event("branch/a", "start", "started"),
        an_event("branch/b", "start", "started"),
        an_event("branch/b", "done", "completed", 1),
        an_event("branch/a", "done", "failed"),
        an_event("", "done", "completed", 1),
    ]
    assert_event_contract(interleaved)

    with pytest.raises(AssertionError, match=r"'branch/b' does not end with 'completed' or 'failed'"):
        assert_event_contract(interleaved[:3] + interleaved[4:])


async def test_check_runnable_wants_the_root_runnable_to_report_at_the_root_path() -> None:
    class ReportsElsewhere(Emits):
        async def run(self, *, input: Any, on_progress: Any = None) -> Any:
            scope = current_scope()
            assert scope is not None
            with use_scope(scope.child("elsewhere")):
                return await super().run(input=input, on_progress=on_progress)

    with pytest.raises(AssertionError, match="the root runnable must report at the root path"):
        await check_runnable(ReportsElsewhere, input=None)

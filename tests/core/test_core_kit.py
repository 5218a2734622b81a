"""The contract testing kit: model doubles, the progress recorder, contract checks, the plugin."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actions import AgentActionRegistry, AiResponse, BaseAgentAction, FunctionCall, Usage
from loops import (
    AiDrivenAgentLoop,
    ProceduralAgentLoop,
    ProgressEvent,
    ProgressStatus,
    current_scope,
    use_scope,
)
from loops.contract import RunnableBase
from loops.scope import ensure_scope
from orchestration.testing import (
    FunctionModel,
    ModelRequest,
    OfflineModel,
    ProgressRecorder,
    ScriptedModel,
    assert_event_contract,
    assert_json_value,
    assert_runnable_shape,
    check_action,
    check_loop,
    check_runnable,
    error_reply,
    example_from_schema,
    text_reply,
    tool_call,
)

# ----- a small JSON Schema validator (the subset the offline model promises) ----------------------

_TYPES: dict[str, Any] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def schema_errors(value: Any, schema: Mapping[str, Any], at: str = "$") -> list[str]:
    """Every way ``value`` breaks ``schema``; empty when it is valid."""
    errors: list[str] = []
    if "const" in schema and value != schema["const"]:
        errors.append(f"{at}: not the const")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{at}: {value!r} not in enum")
    if "anyOf" in schema and not any(not schema_errors(value, s, at) for s in schema["anyOf"]):
        errors.append(f"{at}: matches no anyOf branch")
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if not any(_TYPES[kind](value) for kind in kinds):
            return [*errors, f"{at}: {value!r} is not {kinds}"]
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{at}: shorter than minLength")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{at}: longer than maxLength")
    if isinstance(value, int | float) and not isinstance(value, bool):
        for key, broken in (
            ("minimum", lambda bound: value < bound),
            ("maximum", lambda bound: value > bound),
            ("exclusiveMinimum", lambda bound: value <= bound),
            ("exclusiveMaximum", lambda bound: value >= bound),
        ):
            if key in schema and broken(schema[key]):
                errors.append(f"{at}: {value!r} breaks {key} {schema[key]!r}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{at}: fewer than minItems")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{at}: more than maxItems")
        for index, item in enumerate(value):
            errors += schema_errors(item, schema.get("items", {}), f"{at}[{index}]")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        errors += [f"{at}: missing {key!r}" for key in schema.get("required", []) if key not in value]
        if schema.get("additionalProperties") is False:
            errors += [f"{at}: unexpected {key!r}" for key in value if key not in properties]
        for key, item in value.items():
            if key in properties:
                errors += schema_errors(item, properties[key], f"{at}.{key}")
    return errors


def test_the_validator_of_these_tests_rejects_what_it_should() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "exclusiveMinimum": 0},
            "tags": {"type": "array", "maxItems": 1},
        },
        "required": ["n"],
        "additionalProperties": False,
    }

    assert schema_errors({"n": 1, "tags": ["a"]}, schema) == []
    assert schema_errors({"n": 0, "tags": ["a", "b"], "x": 1}, schema) == [
        "$: unexpected 'x'",
        "$.n: 0 breaks exclusiveMinimum 0",
        "$.tags: more than maxItems",
    ]
    assert schema_errors({"n": True}, schema) == ["$.n: True is not ['integer']"]


# ----- schema strategies --------------------------------------------------------------------------

half_steps = st.integers(-400, 400).map(lambda n: n / 2)
json_scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=4)


@st.composite
def bounded_numbers(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    """An integer or number schema with any mix of (exclusive) bounds that some value satisfies."""
    schema: dict[str, Any] = {"type": kind}
    low = draw(st.none() | half_steps | st.integers(-200, 200))
    high = draw(st.none() | half_steps | st.integers(-200, 200))
    low_exclusive, high_exclusive = draw(st.booleans()), draw(st.booleans())
    if low is not None and high is not None:
        low, high = min(low, high), max(low, high)
        if kind == "integer":
            first = math.floor(low) + 1 if low_exclusive else math.ceil(low)
            last = math.ceil(high) - 1 if high_exclusive else math.floor(high)
            if first > last:
                low, high = low - 3, high + 3
        elif (low_exclusive or high_exclusive) and low == high:
            high = high + 1
    if low is not None:
        schema["exclusiveMinimum" if low_exclusive else "minimum"] = low
    if high is not None:
        schema["exclusiveMaximum" if high_exclusive else "maximum"] = high
    return schema


@st.composite
def strings(draw: st.DrawFn) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    low = draw(st.none() | st.integers(0, 40))
    high = draw(st.none() | st.integers(0, 40))
    if low is not None and high is not None:
        low, high = min(low, high), max(low, high)
    if low is not None:
        schema["minLength"] = low
    if high is not None:
        schema["maxLength"] = high
    return schema


leaf_schemas = st.one_of(
    strings(),
    bounded_numbers("integer"),
    bounded_numbers("number"),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.lists(json_scalars, min_size=1, max_size=4, unique_by=json.dumps).map(lambda values: {"enum": values}),
    st.just({"type": ["null", "string"]}),
)


@st.composite
def arrays(draw: st.DrawFn, items: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "items": draw(items)}
    low = draw(st.none() | st.integers(0, 3))
    high = draw(st.none() | st.integers(0, 4))
    if low is not None and high is not None and low > high:
        low, high = high, low
    if low is not None:
        schema["minItems"] = low
    if high is not None:
        schema["maxItems"] = high
    return schema


@st.composite
def objects(draw: st.DrawFn, values: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    properties = draw(
        st.dictionaries(st.text(alphabet="abcdefgh_", min_size=1, max_size=6), values, max_size=4)
    )
    required = draw(st.lists(st.sampled_from(sorted(properties)), unique=True)) if properties else []
    schema: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    if draw(st.booleans()):
        schema["additionalProperties"] = False
    return schema


any_schema = st.recursive(leaf_schemas, lambda inner: arrays(inner) | objects(inner), max_leaves=8)
tool_parameters = objects(any_schema)


@settings(max_examples=80, deadline=None)
@given(schema=any_schema)
def test_example_from_schema_satisfies_the_schema(schema: dict[str, Any]) -> None:
    value = example_from_schema(schema)

    assert schema_errors(value, schema) == []
    assert_json_value(value, what="the example")


@settings(max_examples=40, deadline=None)
@given(parameters=tool_parameters)
def test_the_offline_model_answers_a_forced_call_with_schema_valid_arguments(
    parameters: dict[str, Any],
) -> None:
    tool = {"name": "extract", "description": "Extract fields.", "parameters": parameters}

    async def ask(model: OfflineModel) -> AiResponse:
        return await model.send_request(
            instruction="Extract.",
            tools=[tool],
            tool_choices=[{"name": "extract"}],
            history_messages=[],
            documents=[],
            files=[],
            is_auto_handle_function_call=False,
        )

    response = asyncio.run(ask(OfflineModel()))
    again = asyncio.run(ask(OfflineModel()))

    assert not response.has_error
    (call,) = response.function_calls
    assert call.name == "extract"
    assert schema_errors(json.loads(call.arguments), parameters) == []
    assert again == response, "the offline model is deterministic"


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 2}, 1),
        ({"type": "integer", "exclusiveMaximum": -5}, -6),
        ({"type": "integer", "minimum": 0.5}, 1),
        ({"type": "number", "exclusiveMinimum": 0, "maximum": 0.25}, 0.125),
        ({"type": "number", "minimum": 0, "exclusiveMinimum": 3}, 3.5),
        ({"type": "integer", "minimum": 0, "exclusiveMinimum": True}, 1),
        ({"type": "string", "minLength": 30}, "[offline model] value" + "." * 9),
        ({"type": "string", "maxLength": 3}, "[of"),
        ({"type": "array", "items": {"const": 7}, "minItems": 3}, [7, 7, 7]),
        ({"anyOf": [{"type": "boolean"}, {"type": "string"}]}, True),
        ({"properties": {"n": {"type": "null"}}}, {"n": None}),
    ],
)
def test_example_from_schema_picks_the_simplest_valid_value(schema: dict[str, Any], value: Any) -> None:
    assert example_from_schema(schema) == value


TOOLS = [
    {
        "name": "search",
        "description": "",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
    {
        "name": "finish",
        "description": "",
        "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}},
    },
]


async def ask(
    model: Any, *, tools: list[Any] = TOOLS, history: list[Any] | None = None, forced: str | None = None
) -> AiResponse:
    response: AiResponse = await model.send_request(
        instruction="Do it.",
        tools=tools,
        tool_choices=[{"name": forced}] if forced else None,
        history_messages=history or [],
        documents=[],
        files=[],
        is_auto_handle_function_call=False,
    )
    return response


async def test_given_a_free_choice_the_offline_model_calls_the_first_tool_once_then_finishes(
    offline_model: OfflineModel,
) -> None:
    first = await ask(offline_model)
    second = await ask(offline_model, history=[{"role": "tool", "tool_call_id": "x", "content": "3 records"}])

    assert [(c.name, json.loads(c.arguments)) for c in first.function_calls] == [
        ("search", {"q": "[offline model] q"})
    ]
    assert [(c.name, json.loads(c.arguments)) for c in second.function_calls] == [
        ("finish", {"answer": "[offline model] 3 records"})
    ]
    assert first.model == "offline" and first.usage.input_tokens > 0 and first.usage.output_tokens > 0
    assert offline_model.calls == 2


async def test_the_offline_model_answers_in_labelled_text_when_there_is_no_tool(
    offline_model: OfflineModel,
) -> None:
    response = await ask(offline_model, tools=[])

    assert (response.text, response.function_calls) == ("[offline model] no tool needed", ())


async def test_the_offline_model_refuses_to_force_a_tool_it_was_not_offered(
    offline_model: OfflineModel,
) -> None:
    response = await ask(offline_model, forced="delete")

    assert response.error == "offline model: forced tool 'delete' was not offered"


async def test_a_responder_gives_domain_answers_for_its_tool() -> None:
    seen: list[tuple[str, str, int]] = []

    def search(tool: Mapping[str, Any], instruction: str, history: Any) -> Mapping[str, Any]:
        seen.append((tool["name"], instruction, len(history)))
        return {"q": "cats born in 2020"}

    model = OfflineModel(responders={"search": search})

    forced = await ask(model, forced="search")
    free = await ask(model)

    assert json.loads(forced.function_calls[0].arguments) == {"q": "cats born in 2020"}
    assert json.loads(free.function_calls[0].arguments) == {"q": "cats born in 2020"}
    assert seen == [("search", "Do it.", 0), ("search", "Do it.", 0)]


async def test_an_ai_driven_loop_runs_to_completion_on_the_offline_model(offline_model: OfflineModel) -> None:
    class Lookup(BaseAgentAction):
        name = "lookup"
        description = "Look a word up."

        @property
        def parameters(self) -> dict[str, Any]:
            return {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}

        async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
            return {"word": arguments["word"], "found": True}

    class Dictionary(AiDrivenAgentLoop):
        registry = AgentActionRegistry.create(actions=[Lookup()])

    report = await check_loop(Dictionary, input="define cat", context={"processor": offline_model})

    assert report.result["finished"] is True
    assert report.result["answer"].startswith("[offline model] ")
    assert report.advance_calls == 2


# ----- scripted and function models ---------------------------------------------------------------


async def test_a_scripted_model_answers_in_order_then_with_an_error(scripted_model: ScriptedModel) -> None:
    scripted_model.push(text_reply("one"), tool_call("search", {"q": "x"}, id="7"))

    first, second, third = [await ask(scripted_model) for _ in range(3)]

    assert first == AiResponse(text="one")
    assert second.function_calls == (FunctionCall(name="search", arguments='{"q": "x"}', id="7"),)
    assert third.error == "scripted model: no response left in the script"
    assert len(scripted_model.requests) == 3


def test_assert_consumed_names_how_many_responses_were_never_requested() -> None:
    model = ScriptedModel([text_reply("a"), text_reply("b")])

    with pytest.raises(AssertionError, match=r"2 scripted response\(s\) were never requested"):
        model.assert_consumed()


async def test_a_double_keeps_a_copy_of_each_request(scripted_model: ScriptedModel) -> None:
    history = [{"role": "user", "content": "hi"}]
    await ask(scripted_model, history=history, forced="search")
    history.append({"role": "assistant", "content": "later"})

    assert scripted_model.requests == [
        ModelRequest(
            instruction="Do it.",
            tools=tuple(TOOLS),
            tool_choices=({"name": "search"},),
            history_messages=({"role": "user", "content": "hi"},),
            documents=(),
            files=(),
            is_auto_handle_function_call=False,
        )
    ]
    assert (scripted_model.requests[0].tool_names, scripted_model.requests[0].forced_tool) == (
        ["search", "finish"],
        "search",
    )


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_function_model_calls_its_function_with_each_request(function_model: Any, kind: str) -> None:
    def turn(request: ModelRequest) -> AiResponse:
        return text_reply(f"{len(request.history_messages)} messages, tools {request.tool_names}")

    async def async_turn(request: ModelRequest) -> AiResponse:
        return turn(request)

    model = function_model(turn if kind == "sync" else async_turn)

    response = await ask(model, history=[{"role": "user", "content": "x"}])

    assert isinstance(model, FunctionModel)
    assert response.text == "1 messages, tools ['search', 'finish']"
    assert len(model.requests) == 1


async def test_a_function_model_insists_on_an_ai_response(function_model: Any) -> None:
    with pytest.raises(TypeError, match="must return an AiResponse, got 'text'"):
        await ask(function_model(lambda request: "text"))


def test_reply_helpers_build_the_responses_they_name() -> None:
    assert tool_call("t", "{broken", id="1") == AiResponse(
        function_calls=(FunctionCall(name="t", arguments="{broken", id="1"),)
    )
    assert tool_call("t", {"a": 1}, usage=Usage(input_tokens=3)).usage == Usage(input_tokens=3)
    assert text_reply("hi") == AiResponse(text="hi")
    assert error_reply("down") == AiResponse(error="down")
    assert error_reply("down").has_error and not text_reply("").has_error


def test_an_ai_response_round_trips_through_json() -> None:
    response = AiResponse(
        text="t",
        function_calls=(FunctionCall(name="a", arguments="{}", id="1"),),
        usage=Usage(input_tokens=5, output_tokens=2),
        model="m",
    )

    assert AiResponse.from_dict(json.loads(json.dumps(response.to_dict()))) == response
    assert (Usage(input_tokens=1, output_tokens=2) + Usage(input_tokens=3)).total_tokens == 6


# ----- the progress recorder ----------------------------------------------------------------------


def an_event(path: str, phase: str, status: str, iteration: int = 0) -> ProgressEvent:
    return ProgressEvent(
        run_id="r",
        path=path,
        runnable="X",
        iteration=iteration,
        max_iterations=3,
        phase=phase,
        status=ProgressStatus(status),
        data={"k": [1]},
    )


def test_the_recorder_groups_events_by_path_and_drops_run_id_and_time_from_the_transcript(
    progress_recorder: ProgressRecorder,
) -> None:
    for event in [
        an_event("", "start", "started"),
        an_event("b/2", "start", "started"),
        an_event("a", "start", "started"),
        an_event("", "done", "completed", 1),
    ]:
        progress_recorder(event)

    assert progress_recorder.paths == ["", "b/2", "a"]
    assert list(progress_recorder.by_path()) == ["", "b/2", "a"]
    assert progress_recorder.transcript() == {
        "": [
            ("X", "start", "started", 0, 3, "", {"k": [1]}),
            ("X", "done", "completed", 1, 3, "", {"k": [1]}),
        ],
        "a": [("X", "start", "started", 0, 3, "", {"k": [1]})],
        "b/2": [("X", "start", "started", 0, 3, "", {"k": [1]})],
    }
    assert progress_recorder.statuses() == ["started", "completed"]
    progress_recorder.clear()
    assert progress_recorder.events == []


# ----- contract checks catch violations -----------------------------------------------------------


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


# ----- the pytest plugin --------------------------------------------------------------------------


def test_the_kit_is_installed_as_a_pytest_plugin(pytestconfig: pytest.Config) -> None:
    plugins = {entry.name: entry.value for entry in entry_points(group="pytest11")}

    assert plugins.get("agentloop") == "orchestration.testing.plugin"
    assert pytestconfig.pluginmanager.has_plugin("agentloop")


def test_the_plugin_fixtures_give_the_kit(
    offline_model: Any,
    scripted_model: Any,
    function_model: Any,
    progress_recorder: Any,
    agentloop_contract: Any,
) -> None:
    assert isinstance(offline_model, OfflineModel)
    assert isinstance(scripted_model, ScriptedModel) and scripted_model.queue == type(scripted_model.queue)()
    assert function_model is FunctionModel
    assert isinstance(progress_recorder, ProgressRecorder) and progress_recorder.events == []
    assert (
        agentloop_contract.check_runnable,
        agentloop_contract.check_loop,
        agentloop_contract.check_action,
        agentloop_contract.assert_runnable_shape,
        agentloop_contract.assert_event_contract,
        agentloop_contract.assert_json_value,
    ) == (
        check_runnable,
        check_loop,
        check_action,
        assert_runnable_shape,
        assert_event_contract,
        assert_json_value,
    )

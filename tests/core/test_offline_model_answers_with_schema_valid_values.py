"""The offline model and ``example_from_schema``: deterministic answers that satisfy the tool schemas."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kit_support import ask

from agentloop.actions import AgentActionRegistry, AiResponse, BaseAgentAction
from agentloop.actions.arguments import argument_problem
from agentloop.loops import AiDrivenAgentLoop
from agentloop.testing import OfflineModel, assert_json_value, check_loop, example_from_schema

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

    assert argument_problem(schema=schema, arguments=value) is None
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
    assert argument_problem(schema=parameters, arguments=json.loads(call.arguments)) is None
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

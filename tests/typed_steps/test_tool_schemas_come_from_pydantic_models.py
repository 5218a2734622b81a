"""``tool_schema``: a pydantic type's JSON Schema as a tool's parameters, as both processors send it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field, TypeAdapter
from typing_extensions import TypedDict

from agentloop import OfflineModel, tool_schema
from agentloop.actions.arguments import argument_problem
from agentloop.orchestration.llm.anthropic.mapping import to_anthropic_tools
from agentloop.orchestration.llm.openai.mapping import to_openai_tools
from agentloop.orchestration.store import validate_tool_payload


class Stop(BaseModel):
    """One stop of a trip."""

    city: str = Field(description="The city.")
    title: str = Field(description="A field called title stays: only generated titles go.")
    nights: int = Field(ge=1, le=30)


class Trip(BaseModel):
    """A trip plan."""

    stops: list[Stop] = Field(min_length=1, max_length=5)
    first: Stop | None = Field(default=None, description="Where it starts.")
    mode: Literal["train", "car"] = "train"


class Node(BaseModel):
    name: str
    children: list[Node] = []


class Tree(BaseModel):
    root: Node


STOP = {
    "description": "One stop of a trip.",
    "type": "object",
    "properties": {
        "city": {"description": "The city.", "type": "string"},
        "title": {"description": "A field called title stays: only generated titles go.", "type": "string"},
        "nights": {"type": "integer", "minimum": 1, "maximum": 30},
    },
    "required": ["city", "title", "nights"],
}


def test_references_are_inlined_and_generated_titles_dropped() -> None:
    assert tool_schema(Trip) == {
        "type": "object",
        "properties": {
            "stops": {"type": "array", "items": STOP, "minItems": 1, "maxItems": 5},
            "first": {"anyOf": [STOP, {"type": "null"}], "default": None, "description": "Where it starts."},
            "mode": {"type": "string", "enum": ["train", "car"], "default": "train"},
        },
        "required": ["stops"],
    }


def test_a_recursive_type_keeps_only_the_definitions_it_cannot_inline() -> None:
    schema = tool_schema(Tree)

    node = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "default": []},
        },
        "required": ["name"],
    }
    assert schema == {
        "type": "object",
        "properties": {"root": node},
        "required": ["root"],
        "$defs": {"Node": node},
    }
    assert argument_problem(schema=schema, arguments={"root": {"name": "a", "children": [{"name": 2}]}}) == (
        "argument 'root.children[0].name' must be of type string"
    )


def test_dataclasses_and_typed_dicts_describe_objects_too() -> None:
    @dataclass
    class Point:
        x: int
        y: int = 0

    class Box(TypedDict):
        width: float

    assert tool_schema(Point)["required"] == ["x"]
    assert tool_schema(Box)["properties"] == {"width": {"type": "number"}}


@pytest.mark.parametrize("not_an_object", [int, list[str], str | None])
def test_a_type_that_is_not_an_object_is_refused(not_an_object: Any) -> None:
    with pytest.raises(TypeError, match="does not describe a JSON object"):
        tool_schema(not_an_object)


def test_the_schema_is_a_valid_tool_payload_both_processors_send_as_it_is() -> None:
    payload = validate_tool_payload(
        {"name": "plan_trip", "description": "Plan.", "parameters": tool_schema(Trip)}
    )

    (openai_tool,) = to_openai_tools([payload])
    (anthropic_tool,) = to_anthropic_tools([payload])

    assert openai_tool["function"]["parameters"] == payload["parameters"]
    assert anthropic_tool["input_schema"] == payload["parameters"]
    assert "$ref" not in str(payload["parameters"])


async def test_the_offline_model_answers_with_arguments_the_type_accepts() -> None:
    response = await OfflineModel().send_request(
        instruction="Plan a trip.",
        tools=[{"name": "plan_trip", "parameters": tool_schema(Trip)}],
        tool_choices=[{"name": "plan_trip"}],
        history_messages=[],
        documents=[],
        files=[],
        is_auto_handle_function_call=False,
    )

    trip = TypeAdapter(Trip).validate_json(response.function_calls[0].arguments)
    assert trip.stops and trip.stops[0].nights >= 1

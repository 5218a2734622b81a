"""``AiDrivenAgentLoop``: bad calls and model faults come back to the model as tool errors or retries."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from ai_driven_support import USER, Researcher, assistant_calls, research, tool_error, tool_ok

from agentloop.actions import AgentActionRegistry, AiResponse, BaseAgentAction
from agentloop.loops import AiDrivenAgentLoop, InlineAgentRunner
from agentloop.testing import ScriptedModel, check_loop, error_reply, text_reply, tool_call

# ----- faults become tool errors the model sees on its next turn ----------------------------------

FAULTS = [
    (
        "unknown tool",
        "teleport",
        "{}",
        "unknown action 'teleport'; known actions: explode, search; or 'finish' to finish",
    ),
    ("non-object arguments", "search", '["cats"]', "arguments of 'search' must be a JSON object"),
    ("missing required argument", "search", '{"limit": 3}', "missing required argument(s): query"),
    ("wrong type", "search", '{"query": 3}', "argument 'query' must be of type string"),
    (
        "boolean for an integer",
        "search",
        '{"query": "a", "limit": true}',
        "argument 'limit' must be of type integer",
    ),
    (
        "a float for an integer",
        "search",
        '{"query": "a", "limit": 2.0}',
        "argument 'limit' must be of type integer",
    ),
    ("unexpected argument", "search", '{"query": "a", "colour": "red"}', "unexpected argument(s): colour"),
    ("finish without an answer", "finish", '{"text": "x"}', "missing required argument(s): answer"),
    (
        "finish with a non-string answer",
        "finish",
        '{"answer": 42}',
        "argument 'answer' must be of type string",
    ),
    ("an action that raises", "explode", "{}", "action 'explode' failed: RuntimeError: kaboom"),
]


@pytest.mark.parametrize(("name", "arguments", "error"), [f[1:] for f in FAULTS], ids=[f[0] for f in FAULTS])
async def test_a_bad_call_is_recorded_as_a_tool_error_the_model_sees_next_turn(
    scripted_model: ScriptedModel, name: str, arguments: str, error: str
) -> None:
    scripted_model.push(tool_call(name, arguments, id="bad"), text_reply("recovered"))

    result = await research(scripted_model)

    assert result["answer"] == "recovered"
    assert scripted_model.requests[1].history_messages == (
        USER,
        assistant_calls(("bad", name, arguments)),
        tool_error("bad", error),
    )


class Tag(BaseAgentAction):
    name = "tag"
    description = "Label records."

    @property
    def parameters(self) -> dict[str, Any]:
        record = {
            "type": "object",
            "properties": {
                "id": {"type": "integer", "minimum": 1},
                "labels": {"type": "array", "items": {"enum": ["red", "blue"]}, "minItems": 1},
            },
            "required": ["id", "labels"],
            "additionalProperties": False,
        }
        return {"type": "object", "properties": {"records": {"type": "array", "items": record}}}

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        return len(arguments.get("records", []))


class Tagger(AiDrivenAgentLoop):
    registry = AgentActionRegistry.create(actions=[Tag()])


NESTED_FAULTS = [
    (
        "a missing key in an item",
        '{"records": [{"id": 1, "labels": ["red"]}, {"labels": ["red"]}]}',
        "argument 'records[1]' is missing required key(s): id",
    ),
    (
        "a bound deep inside",
        '{"records": [{"id": 0, "labels": ["red"]}]}',
        "argument 'records[0].id' must be at least 1",
    ),
    (
        "an enum in a nested array",
        '{"records": [{"id": 1, "labels": ["pink"]}]}',
        "argument 'records[0].labels[0]' must be one of ['red', 'blue']",
    ),
    (
        "an unexpected key before a deeper problem",
        '{"records": [{"id": 1, "labels": [], "colour": "x"}]}',
        "argument 'records[0]' has unexpected key(s): colour",
    ),
    (
        "an object where an array belongs",
        '{"records": {"id": 1}}',
        "argument 'records' must be of type array",
    ),
]


@pytest.mark.parametrize(
    ("arguments", "error"), [f[1:] for f in NESTED_FAULTS], ids=[f[0] for f in NESTED_FAULTS]
)
async def test_a_problem_deep_in_the_arguments_is_a_tool_error_naming_its_path(
    scripted_model: ScriptedModel, arguments: str, error: str
) -> None:
    scripted_model.push(tool_call("tag", arguments, id="bad"), text_reply("recovered"))

    await research(scripted_model, loop=Tagger)

    assert scripted_model.requests[1].history_messages[-1] == tool_error("bad", error)


async def test_nested_arguments_that_fit_the_schema_reach_the_action(scripted_model: ScriptedModel) -> None:
    arguments = {"records": [{"id": 1, "labels": ["red", "blue"]}, {"id": 2, "labels": ["blue"]}]}
    scripted_model.push(tool_call("tag", arguments, id="ok"), text_reply("done"))

    await research(scripted_model, loop=Tagger)

    assert scripted_model.requests[1].history_messages[-1] == tool_ok("ok", 2)


async def test_arguments_that_are_not_json_are_a_tool_error_naming_the_parse_problem(
    scripted_model: ScriptedModel,
) -> None:
    scripted_model.push(tool_call("search", "{query: cats", id="bad"), text_reply("recovered"))

    await research(scripted_model)

    message = scripted_model.requests[1].history_messages[-1]
    assert (message["role"], message["tool_call_id"]) == ("tool", "bad")
    content = json.loads(message["content"])
    assert content["ok"] is False
    assert re.fullmatch(
        r"arguments of 'search' are not valid JSON: Expecting property name .*", content["error"]
    )


# ----- model faults are recorded and retried ------------------------------------------------------


async def test_a_model_error_is_recorded_and_the_turn_is_retried(scripted_model: ScriptedModel) -> None:
    scripted_model.push(error_reply("overloaded"), error_reply("still overloaded"), text_reply("fine now"))

    report = await check_loop(Researcher, input="Find cats", context={"processor": scripted_model})

    assert report.result["answer"] == "fine now"
    assert [state["model_errors"] for state in report.states] == [
        ["overloaded"],
        ["overloaded", "still overloaded"],
        ["overloaded", "still overloaded"],
    ]
    assert [request.history_messages for request in scripted_model.requests] == [(USER,), (USER,), (USER,)]


async def test_a_processor_that_raises_is_a_model_error_not_a_crash(function_model: Any) -> None:
    turns = iter([ConnectionResetError("peer reset"), text_reply("back")])

    def turn(request: Any) -> AiResponse:
        outcome = next(turns)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    report = await check_loop(Researcher, input="x", context={"processor": function_model(turn)})

    assert report.result["answer"] == "back"
    assert report.states[0]["model_errors"] == ["ConnectionResetError: peer reset"]


async def test_a_loop_without_a_processor_fails_clearly() -> None:
    with pytest.raises(RuntimeError, match=r"AiDrivenAgentLoop needs context\.processor"):
        await InlineAgentRunner.create(runnable=Researcher, context={}).request(input="x")

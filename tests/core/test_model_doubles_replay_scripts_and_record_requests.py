"""The scripted and function models, and the reply helpers tests build their turns with."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kit_support import TOOLS, ask

from agentloop.actions import AiResponse, FunctionCall, Usage
from agentloop.testing import (
    FunctionModel,
    ModelRequest,
    ScriptedModel,
    error_reply,
    text_reply,
    tool_call,
)


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

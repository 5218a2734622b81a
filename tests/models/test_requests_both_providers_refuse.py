"""A request neither provider can map reads the same on both: ``<provider>: invalid request: <why>``,
from the one set of checks of the provider-neutral tool shapes (``llm/tool_shapes.py``), and no
request leaves the processor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic_support
import openai_support
import pytest

from agentloop.orchestration.llm.anthropic.processor import AnthropicProcessor
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.testing.servers.anthropic_server import AnthropicCompatibleServer
from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer

PLAN = openai_support.PLAN_TOOL
CALL = {"id": "call_1", "name": "plan_search", "arguments": "{}"}

CASES = [
    pytest.param({"tools": [{"description": "no name"}]}, "tool without a name: ", id="tool-without-name"),
    pytest.param(
        {"tool_choices": [{"name": "plan_search"}]}, "tool_choices given without tools", id="no-tools"
    ),
    pytest.param(
        {"tools": [PLAN], "tool_choices": [{"nom": "plan_search"}]},
        "a tool choice needs a 'name': ",
        id="choice-without-name",
    ),
    pytest.param(
        {"tools": [PLAN], "tool_choices": [{"name": "plan_search"}, {"name": "other"}]},
        "tool choice 'other' is not among the tools",
        id="choice-not-offered",
    ),
    pytest.param(
        {"history": [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": ["x"]}]},
        "history message #1: a tool call is not an object",
        id="call-not-an-object",
    ),
    pytest.param(
        {"history": [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": [{"id": "c"}]}]},
        "history message #1: a tool call needs a 'name'",
        id="call-without-name",
    ),
    pytest.param(
        {"history": [{"role": "assistant", "tool_calls": [{**CALL, "id": ""}]}]},
        "history message #0: tool call 'plan_search' needs an 'id'",
        id="call-without-id",
    ),
    pytest.param(
        {"history": [{"role": "assistant", "tool_calls": [CALL]}, {"role": "tool", "content": "done"}]},
        "history message #1: a tool message needs a 'tool_call_id'",
        id="result-without-call-id",
    ),
]


@pytest.mark.parametrize(("request_fields", "why"), CASES)
async def test_both_providers_refuse_the_same_request_alike(
    request_fields: dict[str, Any],
    why: str,
    openai_server: OpenAICompatibleServer,
    make_processor: Callable[..., OpenAIProcessor],
    anthropic_server: AnthropicCompatibleServer,
    make_anthropic: Callable[..., AnthropicProcessor],
) -> None:
    from_openai = await openai_support.send(make_processor(), **request_fields)
    from_anthropic = await anthropic_support.send(make_anthropic(), **request_fields)

    assert str(from_openai.error).startswith(f"openai: invalid request: {why}"), from_openai.error
    assert str(from_anthropic.error).startswith(f"anthropic: invalid request: {why}"), from_anthropic.error
    assert (openai_server.requests, anthropic_server.requests) == ([], [])

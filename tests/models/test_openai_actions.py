"""A forced-tool action on top of the OpenAI processor: validated values, and fallbacks on faults."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from openai_support import FAST, PLAN_TOOL, send_forced

from agentloop.actions import ForcedToolAction
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.testing.servers.openai_server import (
    OpenAICompatibleServer,
    reply_error,
    reply_tool_call,
)


class ToolStore:
    """An in-memory tool store: ``get_payload(tool_id)``."""

    def __init__(self, payloads: dict[str, Any]) -> None:
        self.payloads = payloads

    def get_payload(self, tool_id: str) -> Any:
        return self.payloads.get(tool_id)


class PlanSearchAction(ForcedToolAction):
    name = "planSearch"
    description = "Plan the record search."
    tool_id_key = "plan_search_tool_id"

    def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
        return "Plan the search for the request."

    def normalize(self, *, parsed: dict[str, Any], arguments: dict[str, Any], context: Any) -> Any:
        steps = parsed.get("steps")
        if not isinstance(steps, list) or not all(isinstance(step, str) for step in steps):
            return None
        return {"steps": steps}


def action_context(processor: OpenAIProcessor) -> dict[str, Any]:
    return {
        "processor": processor,
        "tool_store": ToolStore({"tool-1": json.dumps(PLAN_TOOL)}),
        "plan_search_tool_id": "tool-1",
        "history_messages": [{"role": "user", "content": "invoices from May"}],
    }


async def test_a_forced_tool_action_gets_its_validated_value_through_the_processor(
    openai_server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    openai_server.enqueue(reply_tool_call("plan_search", {"steps": ["by month"]}))

    value = await PlanSearchAction().run(arguments={}, context=action_context(make_processor()))

    assert value == {"steps": ["by month"]}
    [body] = openai_server.completion_requests
    assert body["tool_choice"] == {"type": "function", "function": {"name": "plan_search"}}
    assert body["messages"][-1] == {"role": "user", "content": "invoices from May"}


async def test_arguments_that_are_not_json_are_passed_through_raw(
    openai_server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    raw = '{"steps": ["unterminated'
    openai_server.enqueue(reply_tool_call("plan_search", raw), reply_tool_call("plan_search", raw))
    processor = make_processor()

    response = await send_forced(processor)

    [call] = response.function_calls
    assert call.arguments == raw
    assert PlanSearchAction().parse_function_call_arguments(function_call=call) is None
    assert await PlanSearchAction().run(arguments={}, context=action_context(processor)) is None


async def test_a_wrong_tool_name_from_the_model_makes_the_action_fall_back(
    openai_server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    openai_server.enqueue(*[reply_tool_call("delete_everything", {"steps": ["x"]})] * 2)

    value = await PlanSearchAction().run(arguments={}, context=action_context(make_processor()))

    assert value is None
    assert len(openai_server.requests) == 2  # asked again once (output_retries), wrong again


async def test_a_model_fault_makes_the_action_fall_back_without_raising(
    openai_server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    openai_server.responder = lambda body: reply_error(503, "overloaded", headers=FAST)

    value = await PlanSearchAction().run(arguments={}, context=action_context(make_processor(max_retries=1)))

    assert value is None
    assert len(openai_server.requests) == 2

"""Helpers of the Anthropic processor tests: the key, the tool they force, one turn as a ``ModelRequest``."""

from __future__ import annotations

from typing import Any

from agentloop.actions import AiResponse, ModelRequest
from agentloop.orchestration.llm.anthropic.processor import AnthropicProcessor
from agentloop.orchestration.testing.servers.openai_replies import RecordedRequest

ANTHROPIC_KEY = "sk-ant-test-9d2e4b7c1a8f3e6d"
FAST = {"retry-after-ms": "5"}  # the SDK honours it, so retries take milliseconds

PLAN_TOOL: dict[str, Any] = {
    "name": "plan_search",
    "description": "Plan the record search.",
    "parameters": {
        "type": "object",
        "properties": {"steps": {"type": "array", "items": {"type": "string"}}},
        "required": ["steps"],
    },
}


async def send(
    processor: AnthropicProcessor,
    *,
    instruction: str = "Plan the search.",
    tools: list[dict[str, Any]] | None = None,
    tool_choices: list[dict[str, Any]] | None = None,
    history: list[dict[str, Any]] | None = None,
    documents: list[Any] | None = None,
) -> AiResponse:
    request = ModelRequest(
        instruction=instruction,
        tools=tuple(tools or ()),
        tool_choices=None if tool_choices is None else tuple(tool_choices),
        history_messages=tuple(history or ()),
        documents=tuple(documents or ()),
    )
    return await request.send(processor)


async def send_forced(processor: AnthropicProcessor, **options: Any) -> AiResponse:
    return await send(processor, tools=[PLAN_TOOL], tool_choices=[{"name": "plan_search"}], **options)


def sent_key(request: RecordedRequest) -> str | None:
    """The key a request carried: ``x-api-key``, or a bearer token (newer SDKs send that)."""
    bearer = request.headers.get("authorization", "")
    return request.headers.get("x-api-key") or (bearer[7:] if bearer.startswith("Bearer ") else None)

"""Helpers of the model-processor tests (either provider): the tool they force, and one turn sent as a
``ModelRequest``."""

from __future__ import annotations

from typing import Any

from agentloop.actions import AiResponse, ModelProcessor, ModelRequest

API_KEY = "sk-test-4f1c9a7e2b6d8c0e5a3f"
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
    processor: ModelProcessor,
    *,
    instruction: str = "Plan the search.",
    tools: list[dict[str, Any]] | None = None,
    tool_choices: list[dict[str, Any]] | None = None,
    history: list[dict[str, Any]] | None = None,
    documents: list[Any] | None = None,
    files: list[Any] | None = None,
) -> AiResponse:
    request = ModelRequest(
        instruction=instruction,
        tools=tuple(tools or ()),
        tool_choices=None if tool_choices is None else tuple(tool_choices),
        history_messages=tuple(history or ()),
        documents=tuple(documents or ()),
        files=tuple(files or ()),
    )
    return await request.send(processor)


async def send_forced(processor: ModelProcessor, **options: Any) -> AiResponse:
    return await send(processor, tools=[PLAN_TOOL], tool_choices=[{"name": "plan_search"}], **options)

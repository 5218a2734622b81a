"""What the tests of the testing kit share: two tools, one model request, one progress event."""

from __future__ import annotations

from typing import Any

from agentloop.actions import AiResponse
from agentloop.loops import ProgressEvent, ProgressStatus

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

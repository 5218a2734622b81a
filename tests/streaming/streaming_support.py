"""Helpers of the streaming tests: a sink that keeps step events, and one turn sent in a step."""

from __future__ import annotations

from typing import Any

from agentloop.actions import AiResponse, ModelProcessor, ModelRequest, StepEvent, use_step_events

API_KEY = "sk-test-streaming-0123456789abcdef"

PLAN_TOOL: dict[str, Any] = {
    "name": "plan_search",
    "description": "Plan the record search.",
    "parameters": {
        "type": "object",
        "properties": {"steps": {"type": "array", "items": {"type": "string"}}},
        "required": ["steps"],
    },
}


class KeptEvents:
    """A step-event sink that keeps what it hears."""

    def __init__(self) -> None:
        self.events: list[StepEvent] = []

    def step_event(self, event: StepEvent) -> None:
        self.events.append(event)

    def data(self) -> list[dict[str, Any]]:
        return [dict(event.data) for event in self.events]

    def text(self) -> str:
        return "".join(str(data.get("text", "")) for data in self.data())

    def arguments(self, call_id: str) -> str:
        return "".join(str(data["arguments"]) for data in self.data() if data.get("call_id") == call_id)


def request(*, forced: bool = False) -> ModelRequest:
    """One turn: plain, or forcing ``plan_search``."""
    return ModelRequest(
        instruction="Plan the search.",
        tools=(PLAN_TOOL,) if forced else (),
        tool_choices=({"name": "plan_search"},) if forced else None,
        history_messages=({"role": "user", "content": "invoices from May"},),
    )


async def send(
    processor: ModelProcessor, *, forced: bool = False, sink: KeptEvents | None = None
) -> AiResponse:
    """One turn through ``processor``; its step events go to ``sink`` (none: nobody listens)."""
    if sink is None:
        return await request(forced=forced).send(processor)
    with use_step_events(sink, path="stage/1"):
        return await request(forced=forced).send(processor)

"""Workflows for the usage tests, imported by the test process and, through the worker's imports,
by the worker: a loop calling ``ModelRequest.send`` three times (the streaming how-to's pattern)
on the processor the worker builds from its settings (the standard context)."""

from __future__ import annotations

from typing import Any

from agentloop.actions.context_values import context_value
from agentloop.actions.model import ModelRequest
from agentloop.loops import BaseAgentLoop
from agentloop.orchestration.registry import register
from agentloop.orchestration.runtime.context import standard_context


class SendThrice(BaseAgentLoop):
    """Three raw model calls, one an iteration."""

    max_iterations = 5

    def create_initial_state(self, *, input: Any) -> Any:
        return {"replies": []}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        request = ModelRequest(instruction=f"Say something ({iteration}).")
        reply = await request.send(context_value(self.context, "processor"))
        return {"replies": [*state["replies"], reply.text]}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return len(state["replies"]) == 3

    def build_result(self, *, state: Any) -> Any:
        return state["replies"]


register("usage.send_thrice", SendThrice, context_factory=standard_context)

"""Workflows for the usage tests, imported by the test process and, through the worker's imports,
by the worker: a loop calling ``ModelRequest.send`` three times (the streaming how-to's pattern)
on the processor the worker builds from its settings (the standard context); a loop of marked
calls, alone or its branches packed, whose calls the model server can tell apart."""

from __future__ import annotations

from typing import Any

from agentloop.actions.context_values import context_value
from agentloop.actions.model import ModelRequest
from agentloop.loops import BaseAgentLoop
from agentloop.orchestration.registry import register
from agentloop.orchestration.runtime.context import standard_context
from agentloop.pipelines import BaseCompositeAgent, Branch


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


def usage_marker(tag: str, iteration: int) -> str:
    """What the call of loop ``tag`` at ``iteration`` asks: the model server reads it back."""
    return f"[usage:{tag}:{iteration}]"


class MarkedCalls(BaseAgentLoop):
    """Input ``{"tag", "calls"}``: ``calls`` model calls, one an iteration, each asking
    :func:`usage_marker`."""

    max_iterations = 50

    def create_initial_state(self, *, input: Any) -> Any:
        return {"tag": input["tag"], "calls": input["calls"], "n": 0}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        request = ModelRequest(instruction=usage_marker(state["tag"], iteration))
        response = await request.send(context_value(self.context, "processor"))
        if response.error is not None:
            raise RuntimeError(f"the model call failed: {response.error}")
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= state["calls"])

    def build_result(self, *, state: Any) -> Any:
        return state["n"]


class PackedMarkedCalls(BaseCompositeAgent):
    """Input ``{"tag", "calls", "width"}``: ``width`` :class:`MarkedCalls` branches (tags
    ``<tag>/<i>``), packed two to a task, all at once."""

    pack_size = 2
    max_concurrency = None
    branch_runnables = (MarkedCalls,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [
            Branch(
                runnable=MarkedCalls,
                input={"tag": f"{input['tag']}/{i}", "calls": input["calls"]},
                key=str(i),
            )
            for i in range(input["width"])
        ]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [result.output for result in results]


register("usage.marked_calls", MarkedCalls, context_factory=standard_context)
register("usage.packed_marked_calls", PackedMarkedCalls)

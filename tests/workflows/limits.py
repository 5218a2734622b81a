"""Workflows of the rate-limit and token-budget tests, registered by name.

Imported by the test process and, through ``AGENTLOOP_IMPORTS``, by real
worker processes. Every branch makes a few forced tool calls through the
processor that :func:`agentloop.orchestration.llm.provider.processor_from_env` builds from the
JSON context spec (so the env-driven wiring runs in the workers), wrapped so
each request carries a stamp the test server reads: the worker's pid and
parent pid, and the rate-limit window the call's slot was counted in.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from agentloop.actions import AgentActionRegistry, AiResponse, ForcedToolAction, ModelProcessor, ModelRequest
from agentloop.loops import ProceduralAgentLoop
from agentloop.orchestration.llm.base import BaseProcessor
from agentloop.orchestration.llm.limits.processor import RateLimitedProcessor, current_permit
from agentloop.orchestration.llm.provider import processor_from_env
from agentloop.orchestration.registry import register
from agentloop.pipelines import BaseCompositeAgent, Branch, FailurePolicy

TOOL_ID = "limits.answer"
TOOL = {
    "name": "answer",
    "description": "Answer the question.",
    "parameters": {"type": "object", "properties": {}, "additionalProperties": True},
}
STAMP = re.compile(r"\[limits-stamp (\{.*?\})\]")


class StaticToolStore:
    """The one tool schema the actions use."""

    def get_payload(self, tool_id: str) -> Any:
        return json.dumps(TOOL) if tool_id == TOOL_ID else None


class Stamped(BaseProcessor):
    """Wraps a processor: appends a stamp (pid, parent pid, permit window) to the instruction."""

    def __init__(self, inner: ModelProcessor) -> None:
        self.inner = inner

    async def process(self, request: ModelRequest) -> AiResponse:
        permit = current_permit()
        stamp = {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "window": permit.window if permit is not None else None,
            "enforced": permit.enforced if permit is not None else None,
        }
        instruction = f"{request.instruction}\n[limits-stamp {json.dumps(stamp)}]"
        return await replace(request, instruction=instruction).forward(self.inner)


def read_stamp(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The stamp of a chat-completions request body, or ``None``."""
    for message in body.get("messages", []):
        content = message.get("content") if isinstance(message, Mapping) else None
        match = STAMP.search(content) if isinstance(content, str) else None
        if match:
            stamp: dict[str, Any] = json.loads(match.group(1))
            return stamp
    return None


def environment(spec: Mapping[str, Any]) -> dict[str, str]:
    """The environment ``processor_from_env`` sees, from the context spec."""
    env = {"OPENAI_BASE_URL": str(spec["base_url"]), "OPENAI_API_KEY": "test-key", "OPENAI_MAX_RETRIES": "0"}
    env.update({str(name): str(value) for name, value in dict(spec.get("env", {})).items()})
    return env


def build_context(spec: Mapping[str, Any]) -> SimpleNamespace:
    """The worker-side context: the processor from the spec's environment, stamped.

    Every task builds its own processor and limiter; the limit is shared
    through Redis (``REDIS_URL`` in the spec's environment).
    """
    processor = processor_from_env(environment(spec))
    if isinstance(processor, RateLimitedProcessor):  # stamp inside the limiter: the stamp sees the permit
        processor.inner = Stamped(processor.inner)
    else:
        processor = Stamped(processor)
    return SimpleNamespace(processor=processor, tool_store=StaticToolStore(), tool_id=TOOL_ID)


class Answer(ForcedToolAction):
    name = "answer"
    description = "One forced call of the answer tool."
    tool_id_key = "tool_id"

    def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
        return f"Answer for branch {arguments['branch']}, call {arguments['call']}."

    def normalize(self, *, parsed: dict[str, Any], arguments: dict[str, Any], context: Any) -> Any:
        return {"branch": arguments["branch"], "call": arguments["call"]}


class ModelCalls(ProceduralAgentLoop):
    """Input ``{"branch": key, "calls": n}``: makes ``n`` forced calls, one per iteration."""

    max_iterations = 20

    @property
    def registry(self) -> AgentActionRegistry:
        return AgentActionRegistry.create(actions=[Answer()])

    def create_initial_state(self, *, input: Any) -> Any:
        return {"branch": input["branch"], "calls": input["calls"], "answers": [], "fallbacks": 0}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        arguments = {"branch": state["branch"], "call": iteration}
        value = await self.perform_action(name="answer", arguments=arguments)
        if value is None:
            return {**state, "fallbacks": state["fallbacks"] + 1, "answers": [*state["answers"], None]}
        return {**state, "answers": [*state["answers"], value]}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(len(state["answers"]) >= state["calls"])

    def build_result(self, *, state: Any) -> Any:
        return {
            "branch": state["branch"],
            "answers": len([a for a in state["answers"] if a is not None]),
            "fallbacks": state["fallbacks"],
            "pid": os.getpid(),
            "ppid": os.getppid(),
        }


class ModelFan(BaseCompositeAgent):
    """Input ``{"branches": n, "calls": k}``: ``n`` branches of ``k`` calls; failures collected."""

    failure_policy = FailurePolicy.COLLECT
    branch_runnables = (ModelCalls,)
    max_concurrency = 2  # in-process, as many branches at once as the two workers run
    pack_size = 1  # a task per branch, so the budget is shared across both workers' processes

    def build_branches(self, *, input: Any) -> Sequence[Branch]:
        return [
            Branch(runnable=ModelCalls, input={"branch": f"b{i}", "calls": input["calls"]}, key=f"b{i}")
            for i in range(input["branches"])
        ]


register("limits.model_fan", ModelFan, context_factory=build_context)
register("limits.model_calls", ModelCalls, context_factory=build_context)

"""Workflows whose steps fall back (issue 23), registered by name for the inline and Celery runs.

Imported by the test process and, through ``AGENTLOOP_IMPORTS``, by real worker processes.
Their model (:class:`FallbackModel`) fails a call whose instruction holds ``[down]``, answers a
forced ``reply`` call with an invalid ``text`` when it holds ``[invalid]``, and a request with no
tools in plain text. Their tool store holds no row: a typed step needs none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from pydantic import BaseModel

from agentloop.actions import AiResponse, ForcedToolAction, FunctionCall, ModelRequest, TypedToolAction
from agentloop.loops import AiDrivenAgentLoop, ProceduralAgentLoop
from agentloop.orchestration.registry import register
from agentloop.pipelines import BaseActionStage


class FallbackModel:
    """See the module doc."""

    model_name = "fallbacks"

    async def send_request(
        self, *, instruction: str, tools: Sequence[Mapping[str, Any]], **request: Any
    ) -> AiResponse:
        if "[down]" in instruction:
            return AiResponse.failure("openai: 503 server error after 4 attempts: upstream unavailable")
        if not tools:
            return AiResponse(text=f"plain answer to {instruction}")
        text: Any = 5 if "[invalid]" in instruction else "ok"
        call = FunctionCall(name=str(tools[0]["name"]), arguments=json.dumps({"text": text}))
        return AiResponse(function_calls=(call,))


class EmptyTools:
    """A tool store with no row."""

    def get_payload(self, tool_id: str) -> Any:
        return None


def fallback_context(spec: Mapping[str, Any]) -> Any:
    return SimpleNamespace(processor=FallbackModel(), tool_store=EmptyTools())


class RawAsk(ProceduralAgentLoop):
    """One raw model request; its text, or what the step makes of a failed reply."""

    def create_initial_state(self, *, input: Any) -> Any:
        return {"question": input, "answer": None}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        reply = await ModelRequest(instruction=state["question"]).send(self.context.processor)
        answer = f"(no answer: {reply.error})" if reply.has_error else reply.text
        return {**state, "answer": answer}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return state["answer"] is not None

    def build_result(self, *, state: Any) -> Any:
        return state["answer"]


class Reply(BaseModel):
    text: str


class TypedReply(TypedToolAction[Reply]):
    name = "reply"
    description = "Reply to the question."

    def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
        return f"Reply: {arguments['question']}"


class TypedReplyStage(BaseActionStage):
    action = TypedReply


class PlainReply(ForcedToolAction):
    """A forced tool whose schema is data only: without its row it cannot ask."""

    name = "plain_reply"
    tool_id = "plain_reply"

    def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
        return f"Reply: {arguments['question']}"

    def normalize(self, *, parsed: dict[str, Any], arguments: dict[str, Any], context: Any) -> Any:
        return parsed


class PlainReplyStage(BaseActionStage):
    action = PlainReply


class DownOnceModel:
    """Its first turn fails (the provider was away), its second answers in plain text."""

    model_name = "down-once"

    def __init__(self) -> None:
        self.turns = 0

    async def send_request(self, **request: Any) -> AiResponse:
        self.turns += 1
        if self.turns == 1:
            return AiResponse.failure("openai: 503 server error after 4 attempts: upstream unavailable")
        return AiResponse(text="answered on the second turn")


def down_once_context(spec: Mapping[str, Any]) -> Any:
    return SimpleNamespace(processor=DownOnceModel())


class AskAround(AiDrivenAgentLoop):
    """An AI-driven loop with no actions: the model answers in plain text."""


register("fallbacks.raw", RawAsk, context_factory=fallback_context)
register("fallbacks.ai_down_once", AskAround, context_factory=down_once_context)
register("fallbacks.typed", TypedReplyStage, context_factory=fallback_context)
register("fallbacks.plain", PlainReplyStage, context_factory=fallback_context)

"""``DurableSteps``: the run-time pydantic-ai capability that makes each model request and each
tool call of an agent run one durable step.

pydantic-ai runs the agent's graph; this capability wraps the two kinds of step in it
(``wrap_model_request``, ``wrap_tool_execute``, the public capability hooks) and, for each:

- answers it from the :class:`~agentloop.orchestration.integrations.pydantic_ai.journal.StepJournal`
  when the step finished in an earlier take of the run (a redelivered task, a run sent again after
  a person answered): deterministic re-execution, the agent's code runs again and every finished
  step returns its recorded result, so no model request and no tool call is done twice;
- else checks the run's cancellation and deadline, takes a slot of the provider's rate limit shared
  by the workers, sends the request through :func:`~agentloop.actions.usage.metered_turn` (every
  request counted against the run's usage and ``token_budget``; a spent budget sends nothing),
  counts it in the metrics and traces it, records its result in the journal, and reports a progress
  event (``model_request`` / ``tool_call``) before and after.

The model's response is journalled whole (pydantic-ai's own ``ModelResponse`` as JSON, through
``pydantic_ai.durable_exec.JSON_CODEC``), so a replayed step gives pydantic-ai exactly what the model
said and pydantic-ai validates the structured output as usual; a tool's result is journalled as its
JSON (what the model was sent).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.durable_exec import JSON_CODEC
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_core import to_jsonable_python

from agentloop.actions.model import AiResponse, ModelRequest
from agentloop.actions.recording import TOOL, model_turn, record_entry, recording_wanted
from agentloop.actions.tracing import trace_span
from agentloop.actions.usage import Usage, current_meter, metered_turn
from agentloop.loops.scope import RunScope, within_deadline
from agentloop.orchestration.errors import ReplayedTurnError
from agentloop.orchestration.integrations.pydantic_ai.journal import StepJournal
from agentloop.orchestration.llm.limits.processor import RateLimiter
from agentloop.orchestration.metrics import record as metrics

__all__ = ["DurableSteps", "StepReporter", "request_summary"]

StepReporter = Callable[[str, str, str, dict[str, Any]], Awaitable[None]]
"""Told of each step: ``(phase, status, message, data)``; ``phase`` is ``model_request`` or ``tool_call``,
``status`` ``started``, ``completed`` or ``replayed``."""


@dataclass(frozen=True, slots=True)
class _Sent:
    """A model response with its usage as the meter reads it."""

    response: ModelResponse
    usage: Usage


def response_usage(response: ModelResponse) -> Usage:
    """A pydantic-ai response's tokens as the run's usage."""
    return Usage(input_tokens=response.usage.input_tokens, output_tokens=response.usage.output_tokens)


def describe_response(response: ModelResponse) -> dict[str, Any]:
    """What a progress event says of a response: its tool calls and text (never the prompt)."""
    calls = [part.tool_name for part in response.parts if isinstance(part, ToolCallPart)]
    text = "".join(part.content for part in response.parts if isinstance(part, TextPart))
    return {"tool_calls": calls, "text": text, **response_usage(response).to_dict()}


def request_summary(messages: Any) -> list[dict[str, Any]]:
    """What a model request sends, as a recording compares it: each message's parts, their kind
    and content (tool calls with their arguments), without the timestamps and ids a run makes anew."""
    summary: list[dict[str, Any]] = []
    for message in messages:
        for part in getattr(message, "parts", ()):
            kind = str(getattr(part, "part_kind", type(part).__name__))
            if isinstance(part, ToolCallPart):
                summary.append({"part": kind, "tool": part.tool_name, "args": part.args_as_dict()})
            else:
                content = getattr(part, "content", None)
                summary.append({"part": kind, "content": to_jsonable_python(content, fallback=repr)})
    return summary


class DurableSteps(AbstractCapability[Any]):
    """The capability given to every run of a wrapped agent (module doc)."""

    def __init__(
        self,
        *,
        journal: StepJournal,
        scope: RunScope | None,
        report: StepReporter,
        limiter: RateLimiter | None = None,
    ) -> None:
        super().__init__()
        self.journal = journal
        self.scope = scope
        self.report = report
        self.limiter = limiter
        #: Whether the model request in progress was answered from the journal.
        self.replaying = False

    async def for_run(self, ctx: Any) -> AbstractCapability[Any]:
        return self  # one journal for every run of the agent within this runnable's run

    def _check(self) -> None:
        if self.scope is not None:
            self.scope.check()

    async def _within_deadline(self, work: Awaitable[Any]) -> Any:
        if self.scope is None:
            return await work
        return await within_deadline(self.scope, work, limit=" (in a pydantic-ai step)")

    async def wrap_model_request(self, ctx: Any, *, request_context: Any, handler: Any) -> ModelResponse:
        number = self.journal.next_number("model")
        key = f"model/{number}"
        self.replaying = self.journal.has(key)
        if self.replaying:
            response: ModelResponse = JSON_CODEC.load(ModelResponse, self.journal.get(key))
            await self.report(
                "model_request", "replayed", f"model request {number} (recorded)", {"step": key}
            )
            return response
        self._check()
        model = str(getattr(request_context.model, "model_name", "") or "")
        provider = str(getattr(request_context.model, "system", "") or "pydantic_ai")
        await self.report(
            "model_request", "started", f"model request {number}", {"step": key, "model": model}
        )

        async def send() -> _Sent:
            await self._acquire_slot()
            began, failed = time.perf_counter(), True
            usage = Usage()
            try:
                attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model or None}
                with trace_span(f"chat {model}".strip(), **attributes) as span:
                    response = await self._recorded_turn(request_context, handler, model)
                    usage = response_usage(response)
                    span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
                    span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
                failed = False
            finally:
                metrics.model_called(
                    provider=provider,
                    model=model,
                    seconds=time.perf_counter() - began,
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    failed=failed,
                )
            await self._record_tokens(usage)
            return _Sent(response, usage)

        sent = await metered_turn(send)
        data = {"step": key, "model": model, **describe_response(sent.response)}
        # reported first: the events so far are stored with the journal's checkpoint
        await self.report("model_request", "completed", f"model request {number}", data)
        # the request's usage stored before its step is: a run resumed after its worker died keeps
        # the tokens of every request it does not send again (the meter may hold them a while)
        flush = getattr(current_meter(), "flush", None)
        if callable(flush):
            flush()
        await self.journal.put(key, JSON_CODEC.dump(ModelResponse, sent.response))
        return sent.response

    async def _recorded_turn(self, request_context: Any, handler: Any, model: str) -> ModelResponse:
        """The model's response, through the run's recording tap when the run records (the turn is
        kept) or replays (the recorded response answers, nothing is sent): the response travels as
        an ``AiResponse`` whose ``text`` is pydantic-ai's ``ModelResponse`` as JSON."""
        if not recording_wanted():
            response: ModelResponse = await self._within_deadline(handler(request_context))
            return response

        async def send() -> AiResponse:
            sent = await self._within_deadline(handler(request_context))
            text = json.dumps(JSON_CODEC.dump(ModelResponse, sent))
            return AiResponse(text=text, usage=response_usage(sent), model=model)

        request = ModelRequest(instruction=json.dumps(request_summary(request_context.messages)))
        reply = await model_turn(request, send)
        if reply.has_error:
            raise ReplayedTurnError(f"model request not answered: {reply.error}")
        recorded: ModelResponse = JSON_CODEC.load(ModelResponse, json.loads(reply.text))
        return recorded

    async def wrap_tool_execute(self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any) -> Any:
        # the tool calls a model response asked for, by the response's number and the call's id:
        # both come from the (recorded) response, so a replay finds the same keys
        key = f"tool/{self.journal.current_number('model')}/{call.tool_call_id}"
        name = str(call.tool_name)
        if self.journal.has(key):
            result = self.journal.get(key)
            await self.report("tool_call", "replayed", f"tool {name} (recorded)", {"step": key, "tool": name})
            return result
        self._check()
        await self.report("tool_call", "started", f"tool {name}", {"step": key, "tool": name})
        with trace_span(f"execute_tool {name}", **{"gen_ai.tool.name": name}):
            result = await self._within_deadline(handler(args))
        await self.report("tool_call", "completed", f"tool {name}", {"step": key, "tool": name})
        value = to_jsonable_python(result, fallback=repr)
        await record_entry(
            TOOL, {"name": name, "arguments": to_jsonable_python(args, fallback=repr), "result": value}
        )
        await self.journal.put(key, value)
        return result

    async def _acquire_slot(self) -> None:
        # a slot of the limit every worker shares; waiting too long raises RateLimitTimeoutError,
        # which fails the run with the limit named (never a silent success)
        if self.limiter is not None:
            await self.limiter.acquire()

    async def _record_tokens(self, usage: Usage) -> None:
        if self.limiter is not None:
            await self.limiter.record(usage.total_tokens)

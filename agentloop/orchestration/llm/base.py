"""``BaseProcessor``: a model processor written against one :class:`~agentloop.actions.model.ModelRequest`.

The processor protocol (:class:`agentloop.actions.model.ModelProcessor`) is a method of
seven keywords. A subclass implements :meth:`BaseProcessor.process` instead,
which receives them as one value, so wrappers can pass a request on
(``await request.forward(inner)``) or change one field (``dataclasses.replace``)
without spelling the keywords again.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from agentloop.actions.model import AiResponse, ModelRequest
from agentloop.actions.recording import model_turn
from agentloop.actions.tracing import trace_span
from agentloop.actions.usage import Usage, metered_turn
from agentloop.orchestration.metrics import record as metrics
from agentloop.orchestration.tracing.genai import record_response, request_attributes

__all__ = ["BaseProcessor", "UsageHook"]

UsageHook = Callable[[Usage], Awaitable[None] | None]
"""Called with the token usage of every reply a server returned (``def`` or ``async def``)."""


@dataclass
class _Call:
    """One model call in progress: whether a processor it went through has counted it."""

    counted: bool = False


_call: ContextVar[_Call | None] = ContextVar("agentloop_model_call", default=None)


class BaseProcessor(ABC):
    """A :class:`~agentloop.actions.model.ModelProcessor` whose turns arrive as :class:`ModelRequest`
    values."""

    async def send_request(
        self,
        *,
        instruction: str,
        tools: Sequence[Mapping[str, Any]],
        tool_choices: Sequence[Mapping[str, Any]] | None,
        history_messages: Sequence[Mapping[str, Any]],
        documents: Sequence[Any],
        files: Sequence[Any],
        is_auto_handle_function_call: bool,
    ) -> AiResponse:
        """The protocol's entry point: the keywords become one :class:`ModelRequest` for :meth:`process`."""
        request = ModelRequest(
            instruction=instruction,
            tools=tuple(tools),
            tool_choices=None if tool_choices is None else tuple(tool_choices),
            history_messages=tuple(history_messages),
            documents=tuple(documents),
            files=tuple(files),
            is_auto_handle_function_call=is_auto_handle_function_call,
        )
        # the run's meter counts the call and enforces its budget (actions/usage.py): around the
        # call and its metrics, so the call that passes the budget is in the metrics too
        return await metered_turn(lambda: self._measured(request))

    async def _measured(self, request: ModelRequest) -> AiResponse:
        """:meth:`process`, traced and counted in the metrics (by the innermost processor)."""
        model = str(getattr(self, "model", None) or getattr(self, "model_name", ""))
        call, outer = _Call(), _call.get()
        attributes = request_attributes(model, request.instruction)
        token, began = _call.set(call), time.perf_counter()
        try:
            with trace_span(f"chat {model}".strip(), **attributes) as span:
                # a recorded run keeps the turn; a replay answers it from its recording (actions/recording.py)
                response = await model_turn(request, lambda: self.process(request))
                record_response(span, response)
        finally:
            _call.reset(token)
        if not call.counted:  # the innermost processor counts the call (a wrapper passes it on)
            metrics.model_called(
                provider=self.provider_name,
                model=model,
                seconds=time.perf_counter() - began,
                input_tokens=response.usage.input_tokens,
                output_tokens=response.usage.output_tokens,
                failed=response.has_error,
            )
        if outer is not None:
            outer.counted = True
        return response

    @property
    def provider_name(self) -> str:
        """Who serves the model, as metrics label its calls (``openai``, ``anthropic``, ``offline``);
        a wrapper's is its ``inner`` processor's; else the class's name, lower-case."""
        inner = getattr(self, "inner", None)
        if isinstance(inner, BaseProcessor):
            return inner.provider_name
        return type(self).__name__.lower()

    @abstractmethod
    async def process(self, request: ModelRequest) -> AiResponse:
        """Answer one turn; a model fault is returned as :meth:`AiResponse.failure`, never raised."""

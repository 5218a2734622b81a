"""``BaseProcessor``: a model processor written against one :class:`~agentloop.actions.model.ModelRequest`.

The processor protocol (:class:`agentloop.actions.model.ModelProcessor`) is a method of
seven keywords. A subclass implements :meth:`BaseProcessor.process` instead,
which receives them as one value, so wrappers can pass a request on
(``await request.forward(inner)``) or change one field (``dataclasses.replace``)
without spelling the keywords again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agentloop.actions.model import AiResponse, ModelRequest, Usage
from agentloop.actions.recording import model_turn
from agentloop.actions.tracing import trace_span
from agentloop.orchestration.tracing.genai import record_response, request_attributes

__all__ = ["BaseProcessor", "UsageHook"]

UsageHook = Callable[[Usage], Awaitable[None] | None]
"""Called with the token usage of every reply a server returned (``def`` or ``async def``)."""


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
        model = str(getattr(self, "model", None) or getattr(self, "model_name", ""))
        with trace_span(f"chat {model}".strip(), **request_attributes(model, instruction)) as span:
            # a recorded run keeps the turn; a replay answers it from its recording (actions/recording.py)
            response = await model_turn(request, lambda: self.process(request))
            record_response(span, response)
        return response

    @abstractmethod
    async def process(self, request: ModelRequest) -> AiResponse:
        """Answer one turn; a model fault is returned as :meth:`AiResponse.failure`, never raised."""

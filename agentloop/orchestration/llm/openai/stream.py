"""A streamed Chat Completion read into the :class:`AiResponse` the whole completion would give.

:class:`ChatStreamReader` takes the ``chat.completion.chunk`` values of one streamed request
(``stream=True``, ``stream_options={"include_usage": True}``) and joins them: the text of the
first choice, each tool call's arguments by its ``index`` (its ``id`` and ``name`` from the first
chunk that carries them), the usage from the last chunk, the model from any. The result is what
:func:`~agentloop.orchestration.llm.openai.mapping.from_chat_completion` makes of the same reply sent whole:
the same text, calls with their raw arguments, usage and model (a compatible server that
ignores ``stream_options`` and sends no usage chunk leaves the usage at zero). Each piece is also handed to a
:class:`~agentloop.orchestration.llm.stream_deltas.DeltaReporter`, when a run listens.

A stream that ends before any choice said why it finished (``finish_reason``) was cut short; it
is read as a failure, as a reply with no choices is. Errors raised while iterating (a dropped
connection, a malformed chunk, an error event) are the caller's to turn into a failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from openai.types.chat import ChatCompletionChunk

from agentloop.actions.model import AiResponse, FunctionCall
from agentloop.actions.usage import Usage
from agentloop.orchestration.llm.stream_deltas import DeltaReporter
from agentloop.orchestration.llm.tool_shapes import raw_arguments

__all__ = ["ChatStreamReader"]


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class ChatStreamReader:
    """The state of one streamed reply: what arrived so far (see the module doc)."""

    default_model: str = ""
    reporter: DeltaReporter | None = None
    text: str = ""
    calls: dict[int, _Call] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str | None = None
    chunks: int = 0

    async def add(self, chunk: ChatCompletionChunk) -> None:
        """Take one chunk in (and report its pieces)."""
        self.chunks += 1
        self.model = self.model or str(getattr(chunk, "model", "") or "")
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage = Usage(
                input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            )
        choice = next((c for c in getattr(chunk, "choices", None) or () if c.index == 0), None)
        if choice is None:
            return
        self.finish_reason = choice.finish_reason or self.finish_reason
        delta = choice.delta
        if isinstance(delta.content, str) and delta.content:
            self.text += delta.content
            if self.reporter is not None:
                await self.reporter.text(delta.content)
        for piece in delta.tool_calls or ():
            function = piece.function
            await self._call_piece(
                piece.index,
                call_id=piece.id,
                name=function.name if function is not None else None,
                arguments=function.arguments if function is not None else None,
            )
        legacy = delta.function_call
        if legacy is not None and not delta.tool_calls:
            await self._call_piece(-1, call_id=None, name=legacy.name, arguments=legacy.arguments)

    async def _call_piece(
        self, index: int, *, call_id: str | None, name: str | None, arguments: str | Any
    ) -> None:
        call = self.calls.setdefault(index, _Call())
        call.id = call.id or (call_id or "")
        call.name = call.name or (name or "")
        if arguments is None:
            return
        piece = raw_arguments(arguments)
        call.arguments += piece
        if self.reporter is not None:
            await self.reporter.arguments(index, name=call.name, call_id=call.id, piece=piece)

    def response(self) -> AiResponse:
        """The reply as one :class:`AiResponse` (a failure when the stream was cut short)."""
        model = self.model or self.default_model
        if self.finish_reason is None:
            return AiResponse.failure(
                f"openai: the stream ended after {self.chunks} chunk(s) without a finish reason",
                usage=self.usage,
                model=model,
            )
        legacy = self.calls.pop(-1, None)
        calls = [
            FunctionCall(name=c.name, arguments=c.arguments, id=c.id) for _, c in sorted(self.calls.items())
        ]
        if legacy is not None and not calls:
            calls.append(FunctionCall(name=legacy.name, arguments=legacy.arguments))
        return AiResponse(text=self.text, function_calls=tuple(calls), usage=self.usage, model=model)

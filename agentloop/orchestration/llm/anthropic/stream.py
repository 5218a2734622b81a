"""A streamed Messages API reply read into the :class:`AiResponse` the whole message would give.

:class:`MessageStreamReader` takes the raw events of one streamed request (``stream=True``):
``message_start`` (the model, the input tokens), ``content_block_start`` (a ``text`` block, or a
``tool_use`` block with its ``id`` and ``name``), ``content_block_delta`` (``text_delta`` text,
``input_json_delta`` pieces of a tool's input), ``message_delta`` (the ``stop_reason``, the
output tokens) and ``message_stop``. The result is what
:func:`~agentloop.orchestration.llm.anthropic.mapping.from_message` makes of the same message sent whole:
the text blocks joined, each ``tool_use`` block a call whose arguments are its input
JSON-encoded (the joined pieces parsed and encoded again, as the whole reply's ``input`` is; kept
as sent when they are not JSON), the usage and the model. Each piece is also handed to a
:class:`~agentloop.orchestration.llm.stream_deltas.DeltaReporter`, when a run listens: a tool call's
``delta`` events carry the input's text as the model wrote it.

A stream that ends before ``message_delta`` said why the message stopped was cut short; it is
read as a failure. Errors raised while iterating are the caller's to turn into a failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agentloop.actions.model import AiResponse, FunctionCall
from agentloop.actions.usage import Usage
from agentloop.orchestration.llm.stream_deltas import DeltaReporter

__all__ = ["MessageStreamReader"]


@dataclass
class _Block:
    kind: str
    id: str = ""
    name: str = ""
    text: str = ""


@dataclass
class MessageStreamReader:
    """The state of one streamed message: what arrived so far (see the module doc)."""

    default_model: str = ""
    reporter: DeltaReporter | None = None
    blocks: dict[int, _Block] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    model: str = ""
    stop_reason: str | None = None
    events: int = 0

    async def add(self, event: Any) -> None:
        """Take one raw stream event in (and report its pieces)."""
        self.events += 1
        kind = getattr(event, "type", None)
        if kind == "message_start":
            message = event.message
            self.model = str(getattr(message, "model", "") or "")
            self._count(getattr(message, "usage", None))
        elif kind == "content_block_start":
            block = event.content_block
            self.blocks[event.index] = _Block(
                kind=str(block.type),
                id=str(getattr(block, "id", "") or ""),
                name=str(getattr(block, "name", "") or ""),
            )
        elif kind == "content_block_delta":
            await self._piece(event.index, event.delta)
        elif kind == "message_delta":
            self.stop_reason = getattr(event.delta, "stop_reason", None) or self.stop_reason
            self._count(getattr(event, "usage", None))

    def _count(self, usage: Any) -> None:
        if usage is None:
            return
        if getattr(usage, "input_tokens", None) is not None:
            self.input_tokens = int(usage.input_tokens)
        if getattr(usage, "output_tokens", None) is not None:
            self.output_tokens = int(usage.output_tokens)

    async def _piece(self, index: int, delta: Any) -> None:
        block = self.blocks.setdefault(index, _Block(kind="text"))
        kind = getattr(delta, "type", None)
        if kind == "text_delta" and block.kind == "text":
            block.text += delta.text
            if self.reporter is not None:
                await self.reporter.text(delta.text)
        elif kind == "input_json_delta" and block.kind == "tool_use":
            block.text += delta.partial_json
            if self.reporter is not None:
                await self.reporter.arguments(
                    index, name=block.name, call_id=block.id, piece=delta.partial_json
                )

    def response(self) -> AiResponse:
        """The message as one :class:`AiResponse` (a failure when the stream was cut short)."""
        usage = Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens)
        model = self.model or self.default_model
        if self.stop_reason is None:
            return AiResponse.failure(
                f"anthropic: the stream ended after {self.events} event(s) without a stop reason",
                usage=usage,
                model=model,
            )
        blocks = [block for _, block in sorted(self.blocks.items())]
        calls = tuple(
            FunctionCall(name=block.name, arguments=_arguments(block.text), id=block.id)
            for block in blocks
            if block.kind == "tool_use"
        )
        text = "".join(block.text for block in blocks if block.kind == "text")
        return AiResponse(text=text, function_calls=calls, usage=usage, model=model)


def _arguments(raw: str) -> str:
    """A tool's streamed input as the whole message's ``input`` would be encoded."""
    try:
        value = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return raw  # not JSON: kept as sent, as a string ``input`` is
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

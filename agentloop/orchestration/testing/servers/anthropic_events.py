"""A whole Messages API ``message`` cut into the events a streamed reply sends.

:func:`message_events` is what
:class:`~agentloop.orchestration.testing.servers.anthropic_server.AnthropicCompatibleServer` sends when a
request asks for ``stream: true``, shaped like Anthropic's: ``message_start`` (the message with
no content, the input tokens and one output token), a ``ping``, then for each content block a
``content_block_start`` (a ``text`` block empty; a ``tool_use`` block with its ``id``, ``name``
and ``input`` ``{}``), its ``content_block_delta`` events (``text_delta`` pieces of
``chunk_size`` characters; ``input_json_delta`` pieces of the input's JSON text, or of the input
itself when it is a string) and a ``content_block_stop``; then ``message_delta`` (the
``stop_reason`` and the output tokens) and ``message_stop``. Each is one SSE event
(``event: <type>`` and ``data: <json>``); joined, the pieces give back the message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from agentloop.orchestration.testing.servers.openai_chunks import pieces

__all__ = ["message_events", "sse_event"]


def sse_event(data: Mapping[str, Any]) -> str:
    """One Server-Sent Event named by ``data["type"]``."""
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n"


def _block_events(index: int, block: Mapping[str, Any], size: int) -> Iterator[dict[str, Any]]:
    if block["type"] == "tool_use":
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        raw = block["input"]
        text, delta_type, key = (
            (raw if isinstance(raw, str) else json.dumps(raw)),
            "input_json_delta",
            "partial_json",
        )
    else:
        start, text, delta_type, key = {"type": "text", "text": ""}, block["text"], "text_delta", "text"
    yield {"type": "content_block_start", "index": index, "content_block": start}
    for piece in pieces(text, size):
        yield {"type": "content_block_delta", "index": index, "delta": {"type": delta_type, key: piece}}
    yield {"type": "content_block_stop", "index": index}


def message_events(message: Mapping[str, Any], *, chunk_size: int) -> list[str]:
    """The SSE events of ``message``, as the module doc describes."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for index, block in enumerate(message["content"]):
        events.extend(_block_events(index, block, chunk_size))
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return [sse_event(event) for event in events]

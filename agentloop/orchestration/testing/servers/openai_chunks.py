"""A whole ``chat.completion`` cut into the ``chat.completion.chunk`` values a streamed reply sends.

:func:`completion_chunks` is what
:class:`~agentloop.orchestration.testing.servers.openai_server.OpenAICompatibleServer` sends, one SSE
``data:`` line each, when a request asks for ``stream: true``. Its chunks are shaped like
OpenAI's: a first chunk with the assistant's role and empty content; the content in pieces of
``chunk_size`` characters; each tool call opened by a chunk carrying its ``index``, ``id``,
``type`` and ``name`` (arguments ``""``), then its arguments in pieces; a last choice chunk with
an empty delta and the ``finish_reason``; and, when the request's ``stream_options`` asked for
``include_usage``, ``"usage": null`` on every chunk and one more chunk with no choices and the
usage. Joined, the pieces give back the completion exactly.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["completion_chunks", "pieces"]


def pieces(text: str, size: int) -> Iterator[str]:
    """``text`` in consecutive pieces of ``size`` characters (none for ``""``)."""
    if size < 1:
        raise ValueError(f"chunk size must be positive, not {size!r}")
    return (text[start : start + size] for start in range(0, len(text), size))


def _deltas(message: Mapping[str, Any], size: int) -> Iterator[dict[str, Any]]:
    yield {"role": "assistant", "content": ""}
    for piece in pieces(message.get("content") or "", size):
        yield {"content": piece}
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        yield {
            "tool_calls": [
                {
                    "index": index,
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": function["name"], "arguments": ""},
                }
            ]
        }
        for piece in pieces(function["arguments"], size):
            yield {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}


def completion_chunks(
    completion: Mapping[str, Any], *, chunk_size: int, include_usage: bool
) -> list[dict[str, Any]]:
    """The chunks of ``completion`` (its first choice), as the module doc describes."""
    head = {
        "id": completion["id"],
        "object": "chat.completion.chunk",
        "created": completion["created"],
        "model": completion["model"],
        "system_fingerprint": None,
    }
    if include_usage:
        head["usage"] = None
    choice = completion["choices"][0]

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            **head,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }

    chunks = [chunk(delta) for delta in _deltas(choice["message"], chunk_size)]
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": completion["usage"]})
    return chunks

"""``AnthropicCompatibleServer``: a real local HTTP server that speaks Anthropic's Messages API.

The Anthropic twin of
:class:`~agentloop.orchestration.testing.servers.openai_server.OpenAICompatibleServer`, for
the :class:`~agentloop.orchestration.llm.anthropic.processor.AnthropicProcessor` or any
code on the official ``anthropic`` SDK: a stdlib ``ThreadingHTTPServer`` on
``127.0.0.1`` (a free port, a background thread), so the SDK's own retries,
timeouts and error mapping run for real::

    with AnthropicCompatibleServer() as server:
        server.enqueue(reply_error(429, "slow down", headers={"retry-after-ms": "10"}),
                       reply_tool_call("plan_search", {"steps": ["a"]}))
        processor = AnthropicProcessor(base_url=server.base_url, api_key="test")
        ...
        assert server.message_requests[1]["tool_choice"] == {"type": "tool", "name": "plan_search"}

It answers ``POST /v1/messages`` with, in order: the next scripted reply (the
same reply values as the OpenAI server: :func:`reply_text`,
:func:`reply_tool_call`, :func:`reply_completion`, :func:`reply_delay`,
:func:`reply_disconnect`, :func:`reply_broken_stream`, :func:`reply_json`, and
:func:`reply_error` in
Anthropic's error shape); else the ``responder``; else a call to the forced
tool (``tool_choice`` ``tool``, or ``any``: the first tool) with ``{}``, or the
text ``"ok"``. A reply becomes a ``message`` with ``text`` and ``tool_use``
content blocks, ``stop_reason`` ``tool_use`` or ``end_turn`` and ``usage``
(``input_tokens``/``output_tokens``). A tool call's arguments are the
``input`` when they are JSON, else sent verbatim as a string (a malformed
input, as a non-conforming server would send).

Every request is recorded (:attr:`AnthropicCompatibleServer.requests`) when it
arrives. A request without a key (``x-api-key``, or ``Authorization: Bearer`` as
newer SDKs send it; or a wrong one, when the server was given ``api_key``) gets
a 401, one without ``anthropic-version`` or without ``model``/``max_tokens``/
``messages`` a 400, an unknown path a 404, all in Anthropic's error shape.
Responses carry ``Connection: close`` (a whole reply keeps its connection open with ``keep_alive=True``).

A request with ``"stream": true`` gets its reply as Server-Sent Events in a
chunked body (:mod:`~agentloop.orchestration.testing.servers.anthropic_events`):
``message_start``, each content block's start, deltas (text and tool input in
pieces of ``stream_chunk_size`` characters, ``stream_chunk_delay`` seconds
apart) and stop, ``message_delta`` with the stop reason and output tokens, and
``message_stop``. :func:`reply_broken_stream` breaks a stream after some events:
the connection dropped mid-body, the body ended early, an event that is not
JSON, or an ``error`` event (``overloaded_error``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentloop.orchestration.testing.servers.anthropic_events import message_events, sse_event
from agentloop.orchestration.testing.servers.openai_replies import (
    CompletionReply,
    JsonReply,
    Reply,
    estimate_tokens,
    reply_broken_stream,
    reply_completion,
    reply_delay,
    reply_disconnect,
    reply_json,
    reply_text,
    reply_tool_call,
)
from agentloop.orchestration.testing.servers.scripted_server import ScriptedReplyServer

__all__ = [
    "MESSAGES_PATH",
    "AnthropicCompatibleServer",
    "default_reply",
    "reply_broken_stream",
    "reply_completion",
    "reply_delay",
    "reply_disconnect",
    "reply_error",
    "reply_json",
    "reply_text",
    "reply_tool_call",
]

MESSAGES_PATH = "/v1/messages"
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def reply_error(
    status: int, message: str, *, headers: Mapping[str, str] | None = None, error_type: str | None = None
) -> JsonReply:
    """An Anthropic-shaped error: ``{"type": "error", "error": {"type", "message"}}``.

    Retry hints go in ``headers`` (the SDK honours ``retry-after-ms`` and ``retry-after``).
    """
    kind = (
        error_type or _ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    )
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return JsonReply(status=status, body=body, headers=tuple((headers or {}).items()))


def _forced_tool(body: Mapping[str, Any]) -> str | None:
    choice = body.get("tool_choice")
    if not isinstance(choice, Mapping):
        return None
    if choice.get("type") == "tool" and isinstance(choice.get("name"), str):
        return str(choice["name"])
    if choice.get("type") == "any":
        for tool in body.get("tools") or ():
            if isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
                return str(tool["name"])
    return None


def default_reply(body: Mapping[str, Any]) -> Reply:
    """The deterministic answer when nothing is scripted: call the forced tool with ``{}``, else ``"ok"``."""
    name = _forced_tool(body)
    return reply_tool_call(name, {}) if name is not None else reply_text("ok")


#: What a broken stream sends after its good events (nothing: the connection drops or the body ends).
_FAULT_EVENTS: Mapping[str, list[str]] = {
    "disconnect": [],
    "truncated": [],
    "malformed": ['event: content_block_delta\ndata: {"type": "content_block_delta", "index": \n\n'],
    "error": [sse_event({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})],
}


def _key(headers: Mapping[str, str]) -> str | None:
    """The key sent as ``x-api-key`` or, as newer SDKs send it, as ``Authorization: Bearer``."""
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    return headers.get("x-api-key") or (token if scheme.lower() == "bearer" else None)


def _input(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments  # sent verbatim: a malformed input


class AnthropicCompatibleServer(ScriptedReplyServer):
    """A local Anthropic Messages API server for tests. See the module docstring.

    ``script`` seeds the FIFO of replies; ``responder`` answers when the script
    is empty; ``api_key``, when given, is the only key accepted (else any
    non-empty ``x-api-key`` is). A streamed reply comes in pieces of
    ``stream_chunk_size`` characters, ``stream_chunk_delay`` seconds apart. Use
    it as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    thread_name = "anthropic-test-server"
    fault_events = _FAULT_EVENTS

    def default_reply(self, body: dict[str, Any]) -> Reply:
        return default_reply(body)

    @property
    def base_url(self) -> str:
        """What to pass as the SDK's ``base_url``: ``http://127.0.0.1:PORT`` (the SDK adds ``/v1``)."""
        return f"http://{self._host}:{self.port}"

    @property
    def message_requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the ``POST /v1/messages`` requests received so far."""
        return self.posted(MESSAGES_PATH)

    # the dialect the shared handler speaks

    def refusal(self, method: str, path: str, headers: Mapping[str, str], body: Any) -> JsonReply | None:
        """A 404 for an unknown path, 401 without a (the right) key, 400 without the version or a field."""
        if method != "POST" or path.split("?", 1)[0] != MESSAGES_PATH:
            return reply_error(404, f"Not found: {method} {path}")
        if (problem := self._auth_error(_key(headers))) is not None:
            return reply_error(401, problem)
        if not headers.get("anthropic-version"):
            return reply_error(400, "anthropic-version: header is required")
        if not isinstance(body, dict) or not all(key in body for key in ("model", "max_tokens", "messages")):
            return reply_error(400, "the body must be a JSON object with model, max_tokens and messages")
        return None

    def stream_events(self, rendered: dict[str, Any], request: Mapping[str, Any]) -> list[str]:
        """``message_start``, each block's start, deltas and stop, ``message_delta``, ``message_stop``."""
        return message_events(rendered, chunk_size=self.stream_chunk_size)

    def reply_headers(self) -> list[tuple[str, str]]:
        """Every reply carries a ``request-id``, as Anthropic's do."""
        return [("request-id", f"req_{self._next_id()}")]

    def _auth_error(self, key: str | None) -> str | None:
        if not key or not key.strip():
            return "x-api-key header (or a bearer token) is required"
        if self.api_key is not None and key.strip() != self.api_key:
            return "invalid x-api-key"
        return None

    def render(self, reply: CompletionReply, request: Mapping[str, Any]) -> dict[str, Any]:
        """A ``message`` with ``text`` and ``tool_use`` blocks."""
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.content}] if reply.content else []
        content += [
            {
                "type": "tool_use",
                "id": call.id or f"toolu_{self._next_id():04d}",
                "name": call.name,
                "input": _input(call.arguments),
            }
            for call in reply.tool_calls
        ]
        if reply.usage is not None:
            input_tokens, output_tokens = reply.usage
        else:
            sent = json.dumps([request.get("system", ""), request.get("messages", [])])
            produced = (reply.content or "") + "".join(
                call.name + call.arguments for call in reply.tool_calls
            )
            input_tokens, output_tokens = estimate_tokens(sent), estimate_tokens(produced)
        return {
            "id": f"msg_{self._next_id():04d}",
            "type": "message",
            "role": "assistant",
            "model": reply.model or str(request.get("model") or "test-model"),
            "content": content,
            "stop_reason": reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn"),
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        }

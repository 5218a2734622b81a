"""The replies an :class:`~agentloop.orchestration.testing.servers.openai_server.OpenAICompatibleServer` can
be
scripted with (values and their helpers), and what it records of each request."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "BrokenStreamReply",
    "CompletionReply",
    "DelayedReply",
    "DisconnectReply",
    "JsonReply",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ScriptedToolCall",
    "default_reply",
    "estimate_tokens",
    "reply_broken_stream",
    "reply_completion",
    "reply_delay",
    "reply_disconnect",
    "reply_error",
    "reply_json",
    "reply_text",
    "reply_tool_call",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class ScriptedToolCall:
    """One tool call in a scripted completion. ``arguments`` is sent verbatim.

    ``id`` of ``None`` lets the server number it (``call_1``, ``call_2``, ...).
    """

    name: str
    arguments: str
    id: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CompletionReply:
    """A successful ``chat.completion`` with one choice.

    ``None`` fields are filled in when the reply is sent: ``finish_reason``
    becomes ``"tool_calls"`` or ``"stop"``, ``model`` echoes the request's
    model, and ``usage`` is a deterministic estimate (about four characters a
    token) of the request's messages and the reply.
    """

    content: str | None = None
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    finish_reason: str | None = None
    model: str | None = None
    usage: tuple[int, int] | None = None  # (prompt_tokens, completion_tokens)


@dataclass(frozen=True, kw_only=True, slots=True)
class JsonReply:
    """Any status and JSON body, sent as is (errors, odd shapes such as no choices)."""

    status: int
    body: Any
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class DelayedReply:
    """Wait ``seconds`` (abandoned when the server stops), then send ``then``."""

    seconds: float
    then: Reply


@dataclass(frozen=True, kw_only=True, slots=True)
class DisconnectReply:
    """Close the connection without any response (a dropped connection)."""


StreamFault = Literal["disconnect", "truncated", "malformed", "error"]
"""How a :class:`BrokenStreamReply` breaks: the connection dropped mid-body, the body ended
cleanly but early (no finish reason, no ``[DONE]``), a chunk that is not JSON, or an error
event (``data: {"error": {...}}``, which the ``openai`` SDK raises as ``APIError``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BrokenStreamReply:
    """A streamed ``reply`` that breaks (``fault``) after its first ``after_chunks`` chunks.

    Asked for without ``stream: true``, the server drops the connection instead.
    """

    reply: CompletionReply
    after_chunks: int
    fault: StreamFault = "disconnect"


Reply = CompletionReply | JsonReply | DelayedReply | DisconnectReply | BrokenStreamReply
"""Everything the server can answer with."""

Responder = Callable[[dict[str, Any]], Reply]
"""Per-turn logic: the parsed request JSON in, a reply out."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordedRequest:
    """One request as the server received it. ``headers`` keys are lower-case."""

    method: str
    path: str
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    body: Any = None

    @property
    def json(self) -> dict[str, Any]:
        """The body when it is a JSON object, else ``{}``."""
        return self.body if isinstance(self.body, dict) else {}


def _arguments_text(arguments: str | Mapping[str, Any]) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(dict(arguments))


def reply_completion(
    *,
    content: str | None = None,
    tool_calls: Sequence[tuple[str, str | Mapping[str, Any]]] = (),
    finish_reason: str | None = None,
    model: str | None = None,
    usage: tuple[int, int] | None = None,
) -> CompletionReply:
    """A completion with text and/or tool calls ``(name, arguments)``.

    Mapping arguments are JSON-encoded; string arguments are sent verbatim,
    even when they are not JSON.
    """
    calls = tuple(ScriptedToolCall(name=name, arguments=_arguments_text(args)) for name, args in tool_calls)
    return CompletionReply(
        content=content, tool_calls=calls, finish_reason=finish_reason, model=model, usage=usage
    )


def reply_text(
    text: str, *, model: str | None = None, usage: tuple[int, int] | None = None
) -> CompletionReply:
    """A plain assistant text reply."""
    return reply_completion(content=text, model=model, usage=usage)


def reply_tool_call(
    name: str,
    arguments: str | Mapping[str, Any],
    *,
    call_id: str | None = None,
    model: str | None = None,
    usage: tuple[int, int] | None = None,
) -> CompletionReply:
    """One call to tool ``name``; string ``arguments`` are sent verbatim (even if not JSON)."""
    call = ScriptedToolCall(name=name, arguments=_arguments_text(arguments), id=call_id)
    return CompletionReply(tool_calls=(call,), model=model, usage=usage)


def reply_error(
    status: int,
    message: str,
    *,
    headers: Mapping[str, str] | None = None,
    error_type: str | None = None,
    code: str | None = None,
) -> JsonReply:
    """An OpenAI-shaped error: ``{"error": {"message", "type", "param", "code"}}``.

    Retry hints go in ``headers``: the SDK honours ``retry-after-ms`` and a
    positive ``retry-after`` (note that ``Retry-After: 0`` is ignored by the SDK,
    which then uses its own exponential backoff, 0.5 s and up).
    """
    default_type = (
        "rate_limit_error" if status == 429 else "server_error" if status >= 500 else "invalid_request_error"
    )
    body = {"error": {"message": message, "type": error_type or default_type, "param": None, "code": code}}
    return JsonReply(status=status, body=body, headers=tuple((headers or {}).items()))


def reply_json(body: Any, *, status: int = 200, headers: Mapping[str, str] | None = None) -> JsonReply:
    """Any JSON body with any status, sent verbatim."""
    return JsonReply(status=status, body=body, headers=tuple((headers or {}).items()))


def reply_delay(seconds: float, then: Reply | None = None) -> DelayedReply:
    """Wait ``seconds`` before answering ``then`` (default: ``reply_text("ok")``); for timeouts."""
    return DelayedReply(seconds=seconds, then=then if then is not None else reply_text("ok"))


def reply_disconnect() -> DisconnectReply:
    """Drop the connection without answering (the SDK sees a connection error)."""
    return DisconnectReply()


def reply_broken_stream(
    reply: CompletionReply | None = None, *, after_chunks: int = 2, fault: StreamFault = "disconnect"
) -> BrokenStreamReply:
    """Stream ``reply`` (default ``reply_text("ok")``) and break it after ``after_chunks`` chunks:
    ``"disconnect"`` drops the connection mid-body, ``"truncated"`` ends the body there,
    ``"malformed"`` sends a chunk that is not JSON, ``"error"`` an error event."""
    if after_chunks < 0:
        raise ValueError(f"after_chunks must not be negative, not {after_chunks!r}")
    return BrokenStreamReply(
        reply=reply if reply is not None else reply_text("ok"), after_chunks=after_chunks, fault=fault
    )


def _forced_function_name(body: Mapping[str, Any]) -> str | None:
    choice = body.get("tool_choice")
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        function = choice.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            return str(function["name"])
    if choice == "required":
        for tool in body.get("tools") or ():
            if isinstance(tool, Mapping) and isinstance(tool.get("function"), Mapping):
                name = tool["function"].get("name")
                if isinstance(name, str):
                    return name
    return None


def default_reply(body: Mapping[str, Any]) -> Reply:
    """The deterministic answer when nothing is scripted: call the forced tool with ``{}``, else ``"ok"``."""
    name = _forced_function_name(body)
    return reply_tool_call(name, {}) if name is not None else reply_text("ok")


def estimate_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)

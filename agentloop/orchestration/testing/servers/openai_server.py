"""``OpenAICompatibleServer``: a real local HTTP server that speaks Chat Completions.

A test double for anything that talks to OpenAI through the wire protocol — the
project's :class:`~agentloop.orchestration.llm.openai.processor.OpenAIProcessor`, or
user code on the official ``openai`` SDK. It is a genuine HTTP server (stdlib
``ThreadingHTTPServer`` on ``127.0.0.1``, a free port, a background thread), so
the SDK's own retries, timeouts and error mapping run for real::

    with OpenAICompatibleServer() as server:
        server.enqueue(
            reply_error(429, "slow down", headers={"retry-after-ms": "10"}),
            reply_tool_call("plan_search", {"steps": ["a"]}),
        )
        client = AsyncOpenAI(api_key="test", base_url=server.base_url)
        ...
        assert server.requests[1].body["tool_choice"] == {...}

What it answers, for ``POST /v1/chat/completions``, in order:

1. the next scripted reply (a FIFO filled by the constructor's ``script`` and
   :meth:`OpenAICompatibleServer.enqueue`), built with :func:`reply_text`,
   :func:`reply_tool_call`, :func:`reply_completion`, :func:`reply_error`,
   :func:`reply_json`, :func:`reply_delay`, :func:`reply_disconnect` or
   :func:`reply_broken_stream`;
2. else the ``responder`` (parsed request JSON -> reply), for per-turn logic;
3. else a deterministic default: when ``tool_choice`` forces a function (or is
   ``"required"``), a call to that function (the first tool) with ``{}``;
   otherwise the text ``"ok"``.

A request with ``"stream": true`` gets its reply as Server-Sent Events
(``Content-Type: text/event-stream``, a chunked body): one
``data: {chat.completion.chunk}`` line per chunk, then ``data: [DONE]``. The text
and each tool call's arguments are cut into pieces of ``stream_chunk_size``
characters (default 4), sent ``stream_chunk_delay`` seconds apart (default 0),
and the usage comes in a last chunk when ``stream_options.include_usage`` is
set (:mod:`~agentloop.orchestration.testing.servers.openai_chunks`); joined, they give
back the reply the same request gets unstreamed. :func:`reply_broken_stream`
breaks a stream after some chunks: the connection dropped mid-body, the body
ended early, a chunk that is not JSON, or an error event. Errors (:func:`reply_error`) are never
streamed, as OpenAI answers them before any event.

Every request is recorded in :attr:`OpenAICompatibleServer.requests` (method,
path, lower-cased headers, parsed JSON body) when it arrives, before any
scripted delay. A request without an ``Authorization: Bearer ...`` header gets
OpenAI's 401 (and so does a wrong key when the server was given ``api_key``);
an unknown path gets a 404 and a body that is not a JSON object a 400, all with
OpenAI's error shape. Responses carry ``Connection: close`` (unless ``keep_alive=True``, as
a real server: a whole reply then leaves its connection open for the next request), so no connection
outlives its request and :meth:`OpenAICompatibleServer.stop` returns promptly
(a reply still waiting in a delay is abandoned).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from agentloop.orchestration.testing.servers.openai_chunks import completion_chunks
from agentloop.orchestration.testing.servers.openai_replies import (
    BrokenStreamReply,
    CompletionReply,
    DelayedReply,
    DisconnectReply,
    JsonReply,
    RecordedRequest,
    Reply,
    Responder,
    ScriptedToolCall,
    default_reply,
    estimate_tokens,
    reply_broken_stream,
    reply_completion,
    reply_delay,
    reply_disconnect,
    reply_error,
    reply_json,
    reply_text,
    reply_tool_call,
)
from agentloop.orchestration.testing.servers.scripted_server import ScriptedReplyServer

__all__ = [
    "BrokenStreamReply",
    "CompletionReply",
    "DelayedReply",
    "DisconnectReply",
    "JsonReply",
    "OpenAICompatibleServer",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ScriptedToolCall",
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

CHAT_COMPLETIONS_PATH = "/v1/chat/completions"


#: What a broken stream sends after its good chunks (nothing: the connection drops).
_FAULT_EVENTS: Mapping[str, list[str]] = {
    "disconnect": [],
    "truncated": [],
    "malformed": ['data: {"choices": [{"index": 0, "delta": {"content": \n\n'],
    "error": [
        "data: "
        + json.dumps({"error": {"message": "the model stopped mid-stream", "type": "server_error"}})
        + "\n\n"
    ],
}


def _error_body(message: str, error_type: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


class OpenAICompatibleServer(ScriptedReplyServer):
    """A local OpenAI Chat Completions server for tests. See the module docstring.

    ``script`` seeds the FIFO of replies; ``responder`` answers when the script
    is empty; ``api_key``, when given, is the only key accepted (else any
    ``Bearer`` key is). A streamed reply (``"stream": true``) comes in pieces of
    ``stream_chunk_size`` characters, ``stream_chunk_delay`` seconds apart; both
    are attributes a test may change between requests. Use it as a context
    manager, or call :meth:`start` and :meth:`stop`.
    """

    thread_name = "openai-test-server"
    fault_events = _FAULT_EVENTS

    def default_reply(self, body: dict[str, Any]) -> Reply:
        return default_reply(body)

    @property
    def base_url(self) -> str:
        """What to pass as the SDK's ``base_url``: ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self._host}:{self.port}/v1"

    @property
    def completion_requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the ``POST /v1/chat/completions`` requests received so far."""
        return self.posted(CHAT_COMPLETIONS_PATH)

    # the dialect the shared handler speaks

    def refusal(self, method: str, path: str, headers: Mapping[str, str], body: Any) -> JsonReply | None:
        """OpenAI's 404 for an unknown path, 401 without a (the right) key, 400 without ``messages``."""
        if method != "POST" or path.split("?", 1)[0] != CHAT_COMPLETIONS_PATH:
            return JsonReply(
                status=404, body=_error_body(f"Unknown request URL: {method} {path}", "invalid_request_error")
            )
        auth_error = self._auth_error(headers.get("authorization"))
        if auth_error is not None:
            return JsonReply(
                status=401, body=_error_body(auth_error, "invalid_request_error", "invalid_api_key")
            )
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            message = "The request body must be a JSON object with 'messages'."
            return JsonReply(status=400, body=_error_body(message, "invalid_request_error"))
        return None

    def stream_events(self, rendered: dict[str, Any], request: Mapping[str, Any]) -> list[str]:
        """One ``data:`` line a ``chat.completion.chunk``, then ``data: [DONE]``."""
        options = request.get("stream_options")
        chunks = completion_chunks(
            rendered,
            chunk_size=self.stream_chunk_size,
            include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        )
        return [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks] + ["data: [DONE]\n\n"]

    def _auth_error(self, authorization: str | None) -> str | None:
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return "You didn't provide an API key. Send it in an Authorization header as 'Bearer <key>'."
        if self.api_key is not None and key.strip() != self.api_key:
            return "Incorrect API key provided."
        return None

    def render(self, reply: CompletionReply, request: Mapping[str, Any]) -> dict[str, Any]:
        """A ``chat.completion`` with one choice."""
        tool_calls = [
            {
                "id": call.id or f"call_{self._next_id('call')}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in reply.tool_calls
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
        if tool_calls:
            message["tool_calls"] = tool_calls
        if reply.usage is not None:
            prompt_tokens, completion_tokens = reply.usage
        else:
            prompt_tokens = estimate_tokens(json.dumps(request.get("messages", [])))
            produced = (reply.content or "") + "".join(
                call.name + call.arguments for call in reply.tool_calls
            )
            completion_tokens = estimate_tokens(produced)
        return {
            "id": f"chatcmpl-{self._next_id('completion')}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": reply.model or str(request.get("model") or "test-model"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": reply.finish_reason or ("tool_calls" if tool_calls else "stop"),
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

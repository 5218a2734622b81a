"""``OpenAICompatibleServer``: a real local HTTP server that speaks Chat Completions.

A test double for anything that talks to OpenAI through the wire protocol — the
project's :class:`~orchestration.models.openai_processor.OpenAIProcessor`, or
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
   :func:`reply_json`, :func:`reply_delay` or :func:`reply_disconnect`;
2. else the ``responder`` (parsed request JSON -> reply), for per-turn logic;
3. else a deterministic default: when ``tool_choice`` forces a function (or is
   ``"required"``), a call to that function (the first tool) with ``{}``;
   otherwise the text ``"ok"``.

Every request is recorded in :attr:`OpenAICompatibleServer.requests` (method,
path, lower-cased headers, parsed JSON body) when it arrives, before any
scripted delay. A request without an ``Authorization: Bearer ...`` header gets
OpenAI's 401 (and so does a wrong key when the server was given ``api_key``);
an unknown path gets a 404 and a body that is not a JSON object a 400, all with
OpenAI's error shape. Responses carry ``Connection: close``, so no connection
outlives its request and :meth:`OpenAICompatibleServer.stop` returns promptly
(a reply still waiting in a delay is abandoned).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import MappingProxyType, TracebackType
from typing import Any, Self

logger = logging.getLogger(__name__)

__all__ = [
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
    "reply_completion",
    "reply_delay",
    "reply_disconnect",
    "reply_error",
    "reply_json",
    "reply_text",
    "reply_tool_call",
]

CHAT_COMPLETIONS_PATH = "/v1/chat/completions"


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


Reply = CompletionReply | JsonReply | DelayedReply | DisconnectReply
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


def _estimate_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"
    timeout = 10.0  # a client that stalls mid-request cannot hold a thread for long

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("openai test server: " + format, *args)

    def do_GET(self) -> None:
        self._record(None)
        self._send_json(404, _error_body("Unknown request URL: GET " + self.path, "invalid_request_error"))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        self._record(body)
        owner = self.server.owner
        if self.path.split("?", 1)[0] != CHAT_COMPLETIONS_PATH:
            self._send_json(
                404, _error_body(f"Unknown request URL: POST {self.path}", "invalid_request_error")
            )
            return
        auth_error = owner._auth_error(self.headers.get("Authorization"))
        if auth_error is not None:
            self._send_json(401, _error_body(auth_error, "invalid_request_error", "invalid_api_key"))
            return
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            self._send_json(
                400,
                _error_body(
                    "The request body must be a JSON object with 'messages'.", "invalid_request_error"
                ),
            )
            return
        self._answer(owner._next_reply(body), body)

    def _record(self, body: Any) -> None:
        headers = MappingProxyType({key.lower(): value for key, value in self.headers.items()})
        self.server.owner._record(
            RecordedRequest(method=self.command, path=self.path, headers=headers, body=body)
        )

    def _answer(self, reply: Reply, request: dict[str, Any]) -> None:
        owner = self.server.owner
        while isinstance(reply, DelayedReply):
            if owner._closing.wait(reply.seconds):
                self.close_connection = True
                return  # the server is stopping: abandon the reply
            reply = reply.then
        if isinstance(reply, DisconnectReply):
            self.close_connection = True
            return
        if isinstance(reply, JsonReply):
            self._send_json(reply.status, reply.body, reply.headers)
            return
        self._send_json(200, owner._render_completion(reply, request))

    def _send_json(self, status: int, body: Any, headers: Iterable[tuple[str, str]] = ()) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (e.g. it timed out): nothing to answer
            logger.debug("openai test server: client went away before the reply")
        self.close_connection = True


def _error_body(message: str, error_type: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = False  # handler threads are joined on close (each serves one request)
    block_on_close = True
    owner: OpenAICompatibleServer


class OpenAICompatibleServer:
    """A local OpenAI Chat Completions server for tests. See the module docstring.

    ``script`` seeds the FIFO of replies; ``responder`` answers when the script
    is empty; ``api_key``, when given, is the only key accepted (else any
    ``Bearer`` key is). Use it as a context manager, or call :meth:`start` and
    :meth:`stop`.
    """

    def __init__(
        self,
        *,
        script: Iterable[Reply] = (),
        responder: Responder | None = None,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.responder: Responder | None = responder
        self.api_key = api_key
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._script: deque[Reply] = deque(script)
        self._requests: list[RecordedRequest] = []
        self._call_ids = itertools.count(1)
        self._completion_ids = itertools.count(1)
        self._closing = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle

    def start(self) -> Self:
        """Bind and serve in a background thread. Returns ``self``."""
        if self._httpd is not None:
            raise RuntimeError("server already started")
        self._closing.clear()
        httpd = _HTTPServer((self._host, self._port), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="openai-test-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, abandon delayed replies, close the socket and join every thread."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._closing.set()
        httpd.shutdown()
        httpd.server_close()
        if thread is not None:
            thread.join()
        self._httpd = None
        self._thread = None

    @property
    def running(self) -> bool:
        """Whether the server is serving."""
        return self._httpd is not None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # addresses

    @property
    def port(self) -> int:
        """The bound port (only while running)."""
        if self._httpd is None:
            raise RuntimeError("server is not running")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """What to pass as the SDK's ``base_url``: ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self._host}:{self.port}/v1"

    # script and records

    def enqueue(self, *replies: Reply) -> None:
        """Append replies to the script; each request takes the oldest one."""
        with self._lock:
            self._script.extend(replies)

    @property
    def pending(self) -> int:
        """How many scripted replies are still waiting."""
        with self._lock:
            return len(self._script)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def completion_requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the ``POST /v1/chat/completions`` requests received so far."""
        return [
            request.json
            for request in self.requests
            if request.method == "POST" and request.path.split("?", 1)[0] == CHAT_COMPLETIONS_PATH
        ]

    def clear_requests(self) -> None:
        """Forget the recorded requests."""
        with self._lock:
            self._requests.clear()

    # used by the handler

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _auth_error(self, authorization: str | None) -> str | None:
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return "You didn't provide an API key. Send it in an Authorization header as 'Bearer <key>'."
        if self.api_key is not None and key.strip() != self.api_key:
            return "Incorrect API key provided."
        return None

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            scripted = self._script.popleft() if self._script else None
        if scripted is not None:
            return scripted
        if self.responder is not None:
            return self.responder(body)
        return default_reply(body)

    def _next_id(self, counter: itertools.count[int]) -> int:
        with self._lock:
            return next(counter)

    def _render_completion(self, reply: CompletionReply, request: Mapping[str, Any]) -> dict[str, Any]:
        tool_calls = [
            {
                "id": call.id or f"call_{self._next_id(self._call_ids)}",
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
            prompt_tokens = _estimate_tokens(json.dumps(request.get("messages", [])))
            produced = (reply.content or "") + "".join(
                call.name + call.arguments for call in reply.tool_calls
            )
            completion_tokens = _estimate_tokens(produced)
        return {
            "id": f"chatcmpl-{self._next_id(self._completion_ids)}",
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

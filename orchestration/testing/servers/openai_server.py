"""``OpenAICompatibleServer``: a real local HTTP server that speaks Chat Completions.

A test double for anything that talks to OpenAI through the wire protocol — the
project's :class:`~orchestration.llm.openai_processor.OpenAIProcessor`, or
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
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import MappingProxyType, TracebackType
from typing import Any, Self

from orchestration.testing.servers.openai_replies import (
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
    reply_completion,
    reply_delay,
    reply_disconnect,
    reply_error,
    reply_json,
    reply_text,
    reply_tool_call,
)

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
    request_queue_size = 1024  # hundreds of clients at once (bench/model_bound), not socketserver's 5
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
            prompt_tokens = estimate_tokens(json.dumps(request.get("messages", [])))
            produced = (reply.content or "") + "".join(
                call.name + call.arguments for call in reply.tool_calls
            )
            completion_tokens = estimate_tokens(produced)
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

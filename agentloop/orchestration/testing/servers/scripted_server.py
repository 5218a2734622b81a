"""What the local wire-protocol test servers share: a threaded HTTP server on 127.0.0.1 that
answers from a FIFO script of replies (then a responder, then a default) and records every
request, and streams a reply as Server-Sent Events when asked to (:func:`send_event_stream`).
One handler (:class:`DialectHandler`) serves every protocol: it reads the request, records it,
asks the server's dialect whether to refuse it, waits out delays and sends the reply whole or
streamed. ``openai_server.py`` and ``anthropic_server.py`` give their dialect: the path, the
refusals (authentication, a malformed body), the rendering of a reply and its stream events."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import socket
import threading
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import MappingProxyType, TracebackType
from typing import Any, ClassVar, Self

from agentloop.orchestration.testing.servers.openai_replies import (
    BrokenStreamReply,
    CompletionReply,
    DelayedReply,
    DisconnectReply,
    JsonReply,
    RecordedRequest,
    Reply,
    Responder,
)

__all__ = ["DialectHandler", "OwnedHTTPServer", "ScriptedReplyServer", "send_event_stream"]

logger = logging.getLogger(__name__)


class OwnedHTTPServer(ThreadingHTTPServer):
    """The HTTP server of a :class:`ScriptedReplyServer`; handlers reach it as ``server.owner``."""

    daemon_threads = False  # handler threads are joined on close (each serves one request)
    request_queue_size = 1024  # hundreds of clients connect at once (socketserver's default is 5)
    block_on_close = True
    owner: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        with self._open_lock:
            self._open.add(connection)
        return connection, address

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """End every open connection (a kept-alive one waits for its client's next request)."""
        with self._open_lock:
            open_now = list(self._open)
        for connection in open_now:
            with contextlib.suppress(OSError):  # already gone
                connection.shutdown(socket.SHUT_RDWR)


class ScriptedReplyServer:
    """Serve in a background thread; replies come from the script, the responder or the default.

    Subclasses set :attr:`thread_name` and :attr:`fault_events`, and give :meth:`default_reply`,
    the dialect (:meth:`refusal`, :meth:`render`, :meth:`stream_events`, :meth:`reply_headers`) and
    ``base_url``. A streamed reply comes in pieces of ``stream_chunk_size`` characters,
    ``stream_chunk_delay`` seconds apart (attributes a test may change between requests). Use
    it as a context manager, or call :meth:`start` and :meth:`stop`. With ``keep_alive`` a whole
    reply leaves its connection open, as a real server does; :meth:`stop` ends such connections.
    """

    thread_name: ClassVar[str]
    #: What a broken stream sends after its good events, by fault (nothing: the connection drops).
    fault_events: ClassVar[Mapping[str, Sequence[str]]] = MappingProxyType({})

    def __init__(
        self,
        *,
        script: Iterable[Reply] = (),
        responder: Responder | None = None,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        stream_chunk_size: int = 4,
        stream_chunk_delay: float = 0.0,
        keep_alive: bool = False,
    ) -> None:
        if stream_chunk_size < 1 or stream_chunk_delay < 0:
            raise ValueError("stream_chunk_size must be positive and stream_chunk_delay not negative")
        #: Characters of text or of tool arguments in one streamed piece.
        self.stream_chunk_size = stream_chunk_size
        #: Seconds between two streamed events.
        self.stream_chunk_delay = stream_chunk_delay
        #: Whether a whole (unstreamed) reply keeps its connection open for the next request, as a
        #: real server does (a client then reuses it); by default every reply closes it.
        self.keep_alive = keep_alive
        self.responder: Responder | None = responder
        self.api_key = api_key
        self._host, self._port = host, port
        self._lock = threading.Lock()
        self._script: deque[Reply] = deque(script)
        self._requests: list[RecordedRequest] = []
        self._counters: defaultdict[str, itertools.count[int]] = defaultdict(lambda: itertools.count(1))
        self._closing = threading.Event()
        self._httpd: OwnedHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def default_reply(self, body: dict[str, Any]) -> Reply:
        """The answer when neither the script nor the responder gives one."""
        raise NotImplementedError

    @property
    def base_url(self) -> str:
        """What to pass as the SDK's ``base_url``."""
        raise NotImplementedError

    # the dialect: what the protocol's server gives the shared handler

    def refusal(self, method: str, path: str, headers: Mapping[str, str], body: Any) -> JsonReply | None:
        """The error a request gets before any reply (unknown path, no key, a malformed body), or ``None``."""
        raise NotImplementedError

    def render(self, reply: CompletionReply, request: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON body of ``reply`` (a whole answer) to ``request``."""
        raise NotImplementedError

    def stream_events(self, rendered: dict[str, Any], request: Mapping[str, Any]) -> list[str]:
        """The Server-Sent Events that stream ``rendered`` (from :meth:`render`)."""
        raise NotImplementedError

    def reply_headers(self) -> list[tuple[str, str]]:
        """Headers every reply carries besides the protocol's own (e.g. a request id)."""
        return []

    # lifecycle

    def start(self) -> Self:
        """Bind and serve in a background thread. Returns ``self``."""
        if self._httpd is not None:
            raise RuntimeError("server already started")
        self._closing.clear()
        httpd = OwnedHTTPServer((self._host, self._port), DialectHandler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=self.thread_name, daemon=True
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
        httpd.drop_connections()
        httpd.server_close()
        if thread is not None:
            thread.join()
        self._httpd = self._thread = None

    @property
    def running(self) -> bool:
        """Whether the server is serving."""
        return self._httpd is not None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port (only while running)."""
        if self._httpd is None:
            raise RuntimeError("server is not running")
        return int(self._httpd.server_address[1])

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

    def posted(self, path: str) -> list[dict[str, Any]]:
        """The JSON bodies of the ``POST`` requests to ``path`` received so far."""
        return [
            request.json
            for request in self.requests
            if request.method == "POST" and request.path.split("?", 1)[0] == path
        ]

    # used by the handler

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            scripted = self._script.popleft() if self._script else None
        if scripted is not None:
            return scripted
        return self.responder(body) if self.responder is not None else self.default_reply(body)

    def _next_id(self, kind: str = "") -> int:
        """The next number of the id sequence ``kind`` (each counts from 1)."""
        with self._lock:
            return next(self._counters[kind])


class DialectHandler(BaseHTTPRequestHandler):
    """The request handler of every :class:`ScriptedReplyServer`: the protocol is the server's dialect."""

    server: OwnedHTTPServer
    protocol_version = "HTTP/1.1"
    timeout = 10.0  # a client that stalls mid-request cannot hold a thread for long

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s: " + format, self.server.owner.thread_name, *args)

    def do_GET(self) -> None:
        self._record(None)
        self._refuse_or_answer(None)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        self._record(body)
        self._refuse_or_answer(body)

    def _refuse_or_answer(self, body: Any) -> None:
        owner: ScriptedReplyServer = self.server.owner
        refusal = owner.refusal(self.command, self.path, self._lowered_headers(), body)
        if refusal is not None:
            self._send_json(refusal)
        else:
            self._answer(owner._next_reply(body), body)

    def _lowered_headers(self) -> Mapping[str, str]:
        return MappingProxyType({key.lower(): value for key, value in self.headers.items()})

    def _record(self, body: Any) -> None:
        self.server.owner._record(
            RecordedRequest(method=self.command, path=self.path, headers=self._lowered_headers(), body=body)
        )

    def _answer(self, reply: Reply, request: dict[str, Any]) -> None:
        owner: ScriptedReplyServer = self.server.owner
        while isinstance(reply, DelayedReply):
            if owner._closing.wait(reply.seconds):
                self.close_connection = True
                return  # the server is stopping: abandon the reply
            reply = reply.then
        streamed = request.get("stream") is True
        if isinstance(reply, JsonReply):
            self._send_json(reply)
        elif isinstance(reply, DisconnectReply):
            self.close_connection = True
        elif streamed:
            self._send_stream(reply, request)
        elif isinstance(reply, BrokenStreamReply):  # only a stream can break: unstreamed, it drops
            self.close_connection = True
        else:
            self._send_json(JsonReply(status=200, body=owner.render(reply, request)))

    def _send_stream(self, reply: CompletionReply | BrokenStreamReply, request: dict[str, Any]) -> None:
        """The reply as SSE events in a chunked body; a broken reply ends as its fault says."""
        owner: ScriptedReplyServer = self.server.owner
        broken = reply if isinstance(reply, BrokenStreamReply) else None
        whole = reply.reply if isinstance(reply, BrokenStreamReply) else reply
        events = owner.stream_events(owner.render(whole, request), request)
        if broken is not None:
            events = events[: broken.after_chunks] + list(owner.fault_events[broken.fault])
        complete = broken is None or broken.fault != "disconnect"
        send_event_stream(self, owner, events, complete=complete, headers=owner.reply_headers())

    def _send_json(self, reply: JsonReply) -> None:
        data = json.dumps(reply.body).encode()
        owner: ScriptedReplyServer = self.server.owner
        keep_alive = owner.keep_alive
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if not keep_alive:
                self.send_header("Connection", "close")
            for name, value in [*owner.reply_headers(), *reply.headers]:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (e.g. it timed out): nothing to answer
            logger.debug("%s: client went away before the reply", owner.thread_name)
        self.close_connection = not keep_alive


def send_event_stream(
    handler: BaseHTTPRequestHandler,
    owner: ScriptedReplyServer,
    events: Sequence[str],
    *,
    complete: bool = True,
    headers: Iterable[tuple[str, str]] = (),
) -> None:
    """Answer 200 with ``events`` as ``text/event-stream`` in a chunked body, ``owner.stream_chunk_delay``
    apart; without ``complete`` the body ends without its last chunk (a connection dropped
    mid-body). A stopping server abandons the stream; a client that went away ends it."""
    handler.close_connection = True
    try:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.send_header("Connection", "close")
        for name, value in headers:
            handler.send_header(name, value)
        handler.end_headers()
        for index, event in enumerate(events):
            if index and owner.stream_chunk_delay > 0 and owner._closing.wait(owner.stream_chunk_delay):
                return  # the server is stopping: abandon the stream
            data = event.encode()
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            handler.wfile.flush()
        if complete:
            handler.wfile.write(b"0\r\n\r\n")
    except OSError:  # the client went away
        pass

"""``TcpProxy``: a TCP forwarder on 127.0.0.1 that a test stops and starts, to make a server
refuse connections without root or any change to the network.

Point a client at the proxy instead of the server (:meth:`TcpProxy.url_of` rewrites a URL's
host and port), then::

    with TcpProxy("127.0.0.1", 5432) as proxy:
        engine = create_engine(proxy.url_of(database_url))
        ...
        with proxy.refusing():      # the server is "down": every connection is reset,
            time.sleep(5)           # and new ones are refused (ECONNREFUSED)
        ...                         # it is back, on the same port

While stopped, nothing listens on the proxy's port, so a connect fails at once with
*connection refused*, as it does when a database server is down; the connections that were
open are reset (``RST``), as when the server's process dies. The port stays the same across
:meth:`TcpProxy.stop` and :meth:`TcpProxy.start`. Each open connection is two threads copying
bytes; only 127.0.0.1 is ever listened on.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import TracebackType
from typing import Self

from sqlalchemy.engine import make_url

__all__ = ["TcpProxy"]

LOCAL_HOST = "127.0.0.1"
_ACCEPT_POLL_SECONDS = 0.05
_CHUNK = 65536
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST, not FIN


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a reset, as a dying server's kernel would.

    A copy thread may be blocked reading ``sock``. Closing it alone would not wake that thread,
    and the kernel keeps a socket a read is blocked on: nothing would reach the peer, which
    would wait for ever for an answer the proxy already dropped. Shutting the reading side
    first wakes the thread; the socket is released when it returns, and the peer gets ``RST``.
    """
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with suppress(OSError):
        sock.close()


class _Link:
    """One client connection and its connection to the target, copied both ways."""

    def __init__(
        self, client: socket.socket, upstream: socket.socket, on_done: Callable[[_Link], None]
    ) -> None:
        self.client, self.upstream, self._on_done = client, upstream, on_done
        self._lock = threading.Lock()
        self._open = 2

    def start(self) -> None:
        for source, sink in ((self.client, self.upstream), (self.upstream, self.client)):
            threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(_CHUNK):
                sink.sendall(chunk)
            with suppress(OSError):
                sink.shutdown(socket.SHUT_WR)  # pass the end of stream on
        except OSError:
            self.reset()
        finally:
            with self._lock:
                self._open -= 1
                done = self._open == 0
            if done:
                self.close()

    def reset(self) -> None:
        _reset(self.client)
        _reset(self.upstream)

    def close(self) -> None:
        for sock in (self.client, self.upstream):
            with suppress(OSError):
                sock.close()
        self._on_done(self)


class TcpProxy:
    """Forward ``127.0.0.1:port`` to ``target_host:target_port`` until stopped; see the module doc.

    ``port`` 0 (the default) picks a free port at the first :meth:`start`; it is kept after.
    ``connect_timeout`` bounds each connection to the target (a client whose target does not
    answer is reset).
    """

    def __init__(
        self, target_host: str, target_port: int, *, port: int = 0, connect_timeout: float = 5.0
    ) -> None:
        self.target = (target_host, int(target_port))
        self.port = int(port)
        self.connect_timeout = connect_timeout
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._stopping = threading.Event()
        self._links: set[_Link] = set()
        self._lock = threading.Lock()
        self.accepted = 0
        """How many client connections were accepted since the proxy was made."""

    @property
    def is_running(self) -> bool:
        """Whether the proxy listens (connections are accepted and forwarded)."""
        return self._listener is not None

    @property
    def address(self) -> tuple[str, int]:
        """``("127.0.0.1", port)``, where clients connect."""
        return LOCAL_HOST, self.port

    def url_of(self, url: str) -> str:
        """``url`` (any SQLAlchemy-style URL, e.g. ``postgresql+psycopg://u@host:5432/db``) with its
        host and port replaced by the proxy's; the password, if any, is kept."""
        return make_url(url).set(host=LOCAL_HOST, port=self.port).render_as_string(hide_password=False)

    def start(self) -> None:
        """Listen and forward (no-op when running). Raises ``OSError`` when the port is taken."""
        if self._listener is not None:
            return
        listener = socket.create_server((LOCAL_HOST, self.port), reuse_port=False, backlog=128)
        listener.settimeout(_ACCEPT_POLL_SECONDS)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._stopping.clear()
        self._acceptor = threading.Thread(target=self._accept_loop, args=(listener,), daemon=True)
        self._acceptor.start()

    def stop(self, *, reset: bool = True) -> None:
        """Stop listening: new connections are refused. With ``reset`` (the default) every open
        connection is reset too, as when the server dies; without, open ones go on."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        self._stopping.set()
        if self._acceptor is not None:
            self._acceptor.join()
            self._acceptor = None
        listener.close()
        if reset:
            with self._lock:
                links = list(self._links)
            for link in links:
                link.reset()

    @contextmanager
    def refusing(self, *, reset: bool = True) -> Iterator[None]:
        """:meth:`stop` for the ``with`` block, :meth:`start` after it (on the same port)."""
        self.stop(reset=reset)
        try:
            yield
        finally:
            self.start()

    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._forward(client)

    def _forward(self, client: socket.socket) -> None:
        client.settimeout(None)
        try:
            upstream = socket.create_connection(self.target, timeout=self.connect_timeout)
        except OSError:
            _reset(client)  # the target is down too: the client sees its connection reset
            return
        upstream.settimeout(None)
        for sock in (client, upstream):
            with suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self.accepted += 1
            if self._stopping.is_set():
                _reset(client)
                _reset(upstream)
                return
            link = _Link(client, upstream, self._forget)
            self._links.add(link)
        link.start()

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        host, port = self.target
        return f"TcpProxy({LOCAL_HOST}:{self.port} -> {host}:{port}, running={self.is_running})"

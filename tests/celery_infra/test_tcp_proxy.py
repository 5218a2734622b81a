"""The TCP proxy the fault tests put between a client and a server: it forwards both ways, and
while stopped the server looks down (connections refused, open ones reset), on the same port."""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Iterator
from contextlib import ExitStack, closing, suppress

import pytest

from tests.services.postgres import (
    PostgresUnavailableError,
    private_postgres_database,
    skip_or_fail,
)
from tests.services.tcp_proxy import TcpProxy


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A local server that echoes every byte back, one thread per connection."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    stop = threading.Event()

    def echo(conn: socket.socket) -> None:
        with closing(conn):
            try:
                while data := conn.recv(4096):
                    conn.sendall(data)
            except OSError:
                return

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        server.close()


def _round_trip(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
        return received


def test_the_proxy_forwards_bytes_both_ways(echo_port: int) -> None:
    payload = bytes(range(256)) * 1000
    with TcpProxy("127.0.0.1", echo_port) as proxy:
        assert _round_trip(proxy.port, payload) == payload
        assert proxy.accepted == 1


def test_a_stopped_proxy_refuses_connections_and_resets_open_ones(echo_port: int) -> None:
    with TcpProxy("127.0.0.1", echo_port) as proxy:
        port = proxy.port
        open_one = socket.create_connection(("127.0.0.1", port), timeout=2)
        open_one.sendall(b"x")
        assert open_one.recv(1) == b"x"
        with proxy.refusing():
            assert not proxy.is_running
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=2)
            with pytest.raises(OSError):  # reset by peer, or the end of the stream
                open_one.sendall(b"y")
                if not open_one.recv(1):
                    raise ConnectionResetError("closed")
        open_one.close()
        assert proxy.port == port  # back on the same port
        assert _round_trip(port, b"again") == b"again"


def test_a_client_waiting_for_a_reply_is_reset_when_the_proxy_stops() -> None:
    # the request reached the server, the server answers after the proxy stopped: a client
    # waiting for that answer must see its connection end, as when a server dies, never wait on
    # (the proxy used to close sockets its copy threads were blocked reading, which sends
    # nothing: a PostgreSQL client waited for ever in a query after an outage)
    received, stopped = threading.Event(), threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as server:

        def answer_late() -> None:
            conn, _ = server.accept()
            with closing(conn):
                conn.recv(1)
                received.set()
                stopped.wait(5)  # answers once the proxy has stopped
                with suppress(OSError):
                    conn.sendall(b"late")
                    conn.recv(1)

        threading.Thread(target=answer_late, daemon=True).start()
        with TcpProxy("127.0.0.1", server.getsockname()[1]) as proxy:
            client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
            with closing(client):
                client.sendall(b"?")
                assert received.wait(5)
                proxy.stop()
                stopped.set()
                # the end of the stream, or a reset; never the late answer, nor the client's
                # 5 s timeout (a proxy that left the client waiting)
                with suppress(ConnectionResetError):
                    assert client.recv(4) == b""


def test_a_proxy_whose_target_is_down_resets_its_clients() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    with TcpProxy("127.0.0.1", dead_port, connect_timeout=1) as proxy, pytest.raises(OSError) as reset:
        _round_trip(proxy.port, b"hello")
    # The reset reaches the client at whichever call comes next: the read (ECONNRESET), the send
    # (EPIPE) or, when it arrived before the client's half-close, the shutdown (ENOTCONN: the
    # connection is gone). Never a clean end of stream, which returns instead of raising.
    assert reset.value.errno in (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN), reset.value


def test_the_url_of_a_database_points_at_the_proxy() -> None:
    proxy = TcpProxy("127.0.0.1", 5432, port=6543)
    assert proxy.url_of("postgresql+psycopg://user:secret@db.example:5432/runs") == (
        "postgresql+psycopg://user:secret@127.0.0.1:6543/runs"
    )


@pytest.mark.integration
def test_postgresql_through_the_proxy_goes_down_and_comes_back() -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import OperationalError

    with ExitStack() as stack:
        try:
            url = stack.enter_context(private_postgres_database())
        except PostgresUnavailableError as unavailable:
            skip_or_fail(str(unavailable))
        parsed = make_url(url)
        proxy = stack.enter_context(TcpProxy(parsed.host or "127.0.0.1", parsed.port or 5432))
        engine = create_engine(proxy.url_of(url), pool_pre_ping=True)
        stack.callback(engine.dispose)
        with engine.connect() as connection:
            assert connection.execute(text("select 1")).scalar() == 1
        with (
            proxy.refusing(),
            pytest.raises(OperationalError, match="refused"),
            engine.connect() as connection,
        ):
            connection.execute(text("select 1"))
        with engine.connect() as connection:
            assert connection.execute(text("select 2")).scalar() == 2

"""A private Redis server for tests: its own process, port and empty data set.

``private_redis()`` yields a URL; ``private_redis_server()`` yields a
:class:`RedisServer` that can also be stopped and started again on the same
port (broker-restart tests). Where the URL comes from, in order:

1. ``AGENTLOOP_TEST_REDIS_URL``, when set, is used as given (nothing is
   started; the server cannot be restarted).
2. ``redis-server`` on ``PATH`` is started on a free port in a temporary
   directory, with no persistence, and stopped afterwards.
3. Otherwise :class:`ServiceUnavailable` is raised so a test can skip, except
   when ``CI`` is true: there a missing service is a :class:`ServiceRequiredError`
   so integration tests fail instead of silently skipping.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.services import on_ci

__all__ = [
    "RedisServer",
    "ServiceRequiredError",
    "ServiceUnavailable",
    "private_redis",
    "private_redis_server",
    "service_unavailable",
]

_START_TIMEOUT = 10.0
_STOP_TIMEOUT = 5.0


class ServiceUnavailable(Exception):
    """A server a test needs is not available here; the test should skip with :attr:`reason`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ServiceRequiredError(RuntimeError):
    """A server a test needs is not available, and ``CI`` says integration tests must run."""


def service_unavailable(reason: str) -> Exception:
    """The error to raise for a missing service: loud under CI, skippable elsewhere."""
    if on_ci():
        return ServiceRequiredError(f"{reason} (CI is set: integration tests must not skip)")
    return ServiceUnavailable(reason)


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _answers_ping(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when a Redis server on ``host:port`` answers ``PING`` (raw protocol, no client pool)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """A ``redis-server`` process owned by the test run, restartable on the same port.

    Build it with :func:`private_redis_server`. Attributes: :attr:`url`
    (``redis://127.0.0.1:PORT/0``), :attr:`port`, :attr:`restartable` (False
    for an external server from ``AGENTLOOP_TEST_REDIS_URL``).
    """

    def __init__(
        self, *, url: str, port: int | None, workdir: Path | None, executable: str | None, appendonly: bool
    ) -> None:
        self.url = url
        self.port = port
        self._workdir = workdir
        self._executable = executable
        self._appendonly = appendonly
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def restartable(self) -> bool:
        """Whether :meth:`stop` and :meth:`start` control a process this object owns."""
        return self._executable is not None

    @property
    def is_running(self) -> bool:
        """Whether the owned process is alive (an external server counts as running)."""
        if not self.restartable:
            return True
        return self._process is not None and self._process.poll() is None

    def _require_owned(self) -> tuple[str, int, Path]:
        if self._executable is None or self.port is None or self._workdir is None:
            raise RuntimeError(f"the Redis server at {self.url} is external (AGENTLOOP_TEST_REDIS_URL)")
        return self._executable, self.port, self._workdir

    def start(self, timeout: float = _START_TIMEOUT) -> None:
        """Start the server on its port and wait until it answers ``PING``; no-op when running."""
        executable, port, workdir = self._require_owned()
        if self.is_running:
            return
        args = [
            executable,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(workdir),
            "--save", "",
            "--appendonly", "yes" if self._appendonly else "no",
            "--daemonize", "no",
            "--protected-mode", "no",
            "--loglevel", "warning",
            "--logfile", str(workdir / "redis.log"),
        ]  # fmt: skip
        self._process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited with {self._process.returncode} on port {port}:\n{self.log_text()}"
                )
            if _answers_ping("127.0.0.1", port):
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(
            f"redis-server on port {port} did not answer PING in {timeout}s:\n{self.log_text()}"
        )

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server (``SIGTERM``, or ``SIGKILL`` when ``kill``; ``SIGKILL`` after 5 s anyway).

        With ``appendonly=False`` (the default) its data is gone afterwards.
        """
        self._require_owned()
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            process.wait(_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self) -> None:
        """:meth:`stop` then :meth:`start`, on the same port."""
        self.stop()
        self.start()

    def log_text(self) -> str:
        """The server's log so far ('' for an external server or before it started)."""
        if self._workdir is None:
            return ""
        path = self._workdir / "redis.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def __repr__(self) -> str:
        return f"RedisServer(url={self.url!r}, running={self.is_running})"


@contextmanager
def private_redis_server(*, appendonly: bool = False) -> Iterator[RedisServer]:
    """A private Redis server for the ``with`` block (see the module doc for where it comes from).

    Args:
        appendonly: keep data across :meth:`RedisServer.stop`/``start`` with an
            append-only file (fsync always); off by default (``--save ""
            --appendonly no``: nothing touches the disk).

    Raises:
        ServiceUnavailable: no Redis here (skip the test).
        ServiceRequiredError: no Redis here and ``CI`` is set.
    """
    external = os.environ.get("AGENTLOOP_TEST_REDIS_URL", "").strip()
    if external:
        yield RedisServer(url=external, port=None, workdir=None, executable=None, appendonly=appendonly)
        return
    executable = shutil.which("redis-server")
    if executable is None:
        raise service_unavailable("no Redis: set AGENTLOOP_TEST_REDIS_URL or put redis-server on PATH")
    with tempfile.TemporaryDirectory(prefix="agentloop-redis-") as tmp:
        server: RedisServer | None = None
        for _attempt in range(3):  # a free port can be taken between probing and binding it
            port = _free_port()
            server = RedisServer(
                url=f"redis://127.0.0.1:{port}/0",
                port=port,
                workdir=Path(tmp),
                executable=executable,
                appendonly=appendonly,
            )
            try:
                server.start()
                break
            except RuntimeError:
                server.stop()
                if _attempt == 2:
                    raise
        assert server is not None
        try:
            yield server
        finally:
            server.stop()


@contextmanager
def private_redis() -> Iterator[str]:
    """The URL of a private Redis server for the ``with`` block; see :func:`private_redis_server`."""
    with private_redis_server() as server:
        yield server.url

"""MCP servers for the tests, written with the official SDK (``counting_server.py``), reached over
stdio (started for each call) and Streamable HTTP (one server process per module); each counts the
tool calls it received in a file the test reads."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentloop.orchestration.mcp.servers import McpServer

SERVER = str(Path(__file__).resolve().parent / "counting_server.py")


class Calls:
    """The tool calls a server received, read from its count file."""

    def __init__(self, path: Path, skip: int = 0) -> None:
        self.path, self.skip = path, skip

    def _lines(self) -> list[str]:
        if not self.path.exists():
            return []
        return [line for line in self.path.read_text().splitlines() if line.strip()][self.skip :]

    def since_now(self) -> Calls:
        """The calls made from now on (a server shared by a module's tests)."""
        return Calls(self.path, self.skip + len(self._lines()))

    def names(self) -> list[str]:
        return [line.split()[0] for line in self._lines()]

    def count(self, tool: str | None = None) -> int:
        return len([name for name in self.names() if tool is None or name == tool])

    def pids(self) -> set[str]:
        return {line.split()[1] for line in self._lines()}


@pytest.fixture
def calls(tmp_path: Path) -> Calls:
    return Calls(tmp_path / "calls.txt")


def stdio_server(calls: Calls, **options: object) -> McpServer:
    return McpServer.stdio(
        "counting",
        [sys.executable, SERVER, "stdio"],
        env={"MCP_COUNT_FILE": str(calls.path)},
        **options,
    )


@pytest.fixture
def stdio(calls: Calls) -> McpServer:
    return stdio_server(calls)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Calls]]:
    """A Streamable HTTP server on a free port: its URL and its calls."""
    calls = Calls(tmp_path_factory.mktemp("mcp-http") / "calls.txt")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, SERVER, "http", str(port)],
        env={"MCP_COUNT_FILE": str(calls.path), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert process.poll() is None, "the MCP HTTP server exited"
                assert time.monotonic() < deadline, "the MCP HTTP server did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", calls
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def http(http_server: tuple[str, Calls]) -> tuple[McpServer, Calls]:
    """The module's HTTP server as an :class:`McpServer`, and the calls made during this test."""
    url, calls = http_server
    return McpServer.http("counting", url), calls.since_now()

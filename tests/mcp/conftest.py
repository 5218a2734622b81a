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
from mcp_support import SERVER, Calls, free_port, stdio_server

from agentloop.orchestration.mcp.servers import McpServer


@pytest.fixture
def calls(tmp_path: Path) -> Calls:
    return Calls(tmp_path / "calls.txt")


@pytest.fixture
def stdio(calls: Calls) -> McpServer:
    return stdio_server(calls)


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

"""What the MCP tests share: the counting server's path, its calls read from its count file, and
the stdio server of a test."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

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


def stdio_server(calls: Calls, **options: object) -> McpServer:
    return McpServer.stdio(
        "counting",
        [sys.executable, SERVER, "stdio"],
        env={"MCP_COUNT_FILE": str(calls.path)},
        **options,
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])

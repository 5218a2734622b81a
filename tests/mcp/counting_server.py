"""An MCP server written with the official SDK (``MCPServer``) for the tests: every tool call
appends one line (``<tool> <pid>``) to the file named by ``MCP_COUNT_FILE``, so a test counts
the calls the server received.

Run ``python tests/mcp/counting_server.py stdio`` or ``... http PORT``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("counting", log_level="WARNING")


def _count(tool: str) -> None:
    path = os.environ.get("MCP_COUNT_FILE")
    if path:
        with open(path, "a") as handle:
            handle.write(f"{tool} {os.getpid()}\n")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    _count("add")
    return a + b


@server.tool()
def lookup(city: str) -> dict[str, Any]:
    """The weather of a city, as structured data."""
    _count("lookup")
    return {"city": city, "celsius": 21}


@server.tool()
def refuse(reason: str) -> str:
    """Always fails: a tool error (isError)."""
    _count("refuse")
    raise ToolError(f"refused: {reason}")


@server.tool()
async def slow(seconds: float) -> str:
    """Sleeps ``seconds`` first."""
    _count("slow")
    await asyncio.sleep(seconds)
    return "slept"


@server.tool()
async def steps(count: int, ctx: Context) -> str:
    """Reports ``count`` progress notifications, then answers."""
    _count("steps")
    for step in range(count):
        await ctx.report_progress(step + 1, count, f"step {step + 1}")
        await asyncio.sleep(0.01)
    return f"{count} steps"


@server.tool()
def huge(size: int) -> str:
    """A text of ``size`` characters."""
    _count("huge")
    return "x" * size


@server.tool()
def die() -> str:
    """The server process exits in the middle of the call."""
    _count("die")
    os._exit(3)


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")

"""One MCP session per call, on the official ``mcp`` SDK: the tool list read, a tool called.

Each call opens its own session (a stdio server is started for it and stopped after it, an HTTP
server gets its handshake) and closes it: nothing outlives the event loop that made the call, and a
server that died is reached afresh by the next call. What a call got is an *outcome*, JSON data
that a recording keeps and a replay gives back (:func:`call_tool`):

- ``{"status": "ok", "value": ..., "text": ...}``: the result (its structured content when the
  server sent one, else its text);
- ``{"status": "tool_error", "message": ...}``: the tool answered with ``isError``, or refused
  the arguments;
- ``{"status": "unavailable", "reason": ...}``: the server could not be reached, did not answer
  within ``call_seconds``, or died in the call;
- ``{"status": "refused", "reason": ...}``: the result was larger than ``max_result_bytes`` or
  not a result the protocol allows.

Every message is scrubbed of the server's secrets (:meth:`McpServer.hide`). While a replay blocks
the network no session opens, stdio included (:func:`~agentloop.orchestration.replay.network_blocked`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TextIO

from pydantic import ValidationError

from agentloop.orchestration.errors import NetworkBlockedError
from agentloop.orchestration.mcp.servers import McpServer
from agentloop.orchestration.replay import network_blocked

OK, TOOL_ERROR, UNAVAILABLE, REFUSED = "ok", "tool_error", "unavailable", "refused"
#: JSON-RPC errors that are the tool's answer to these arguments, not the server's fault.
_ANSWER_CODES = frozenset({-32602, -32601})
#: Seconds a session may take to open (start the process, the handshake) before it counts as down.
OPEN_SECONDS = 30.0

ProgressHook = Callable[[float, float | None, str | None], Awaitable[None]]


@dataclass(frozen=True, kw_only=True, slots=True)
class ListedTool:
    """One tool a server lists: its name, description and input schema."""

    name: str
    description: str
    parameters: dict[str, Any]


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: this process's, when it is a real file (a Celery
    worker's ``sys.stderr`` is a logging proxy, which a subprocess cannot be given), else
    the original stderr, else ``os.devnull``."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return _devnull()


@functools.cache
def _devnull() -> TextIO:
    return open(os.devnull, "w")


def _client(server: McpServer) -> Any:
    from mcp import Client, StdioServerParameters  # the `mcp` extra, loaded on first use
    from mcp.client.stdio import stdio_client

    if network_blocked():
        raise NetworkBlockedError(f"replay: no network; {server.where()} was not reached")
    if server.command:
        parameters = StdioServerParameters(
            command=server.command[0],
            args=list(server.command[1:]),
            env=dict(server.env) or None,
            cwd=server.cwd,
        )
        target: Any = stdio_client(parameters, errlog=_errlog())
    else:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        assert server.url is not None
        http = create_mcp_http_client(headers=dict(server.headers))
        target = streamable_http_client(server.url, http_client=http)
    return Client(target, cache=None)


def _leaf(error: BaseException) -> BaseException:
    """The first error inside (nested) exception groups: what the task groups of a transport hid."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _describe(server: McpServer, error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return server.hide(text)


async def list_tools(server: McpServer) -> list[ListedTool]:
    """Every tool ``server`` lists that its filter lets through (all pages); raises
    :class:`~agentloop.orchestration.errors.McpUnavailableError` when it cannot be read."""
    from agentloop.orchestration.errors import McpUnavailableError

    try:
        async with asyncio.timeout(OPEN_SECONDS + server.call_seconds):
            async with _client(server) as client:
                tools: list[ListedTool] = []
                cursor: str | None = None
                for _ in range(100):  # a paginator that never ends cannot hang the read
                    page = await client.list_tools(cursor=cursor)
                    for tool in page.tools:
                        if server.offers(tool.name):
                            tools.append(
                                ListedTool(
                                    name=tool.name,
                                    description=tool.description or "",
                                    parameters=dict(tool.input_schema),
                                )
                            )
                    cursor = page.next_cursor
                    if cursor is None:
                        break
                return tools
    except NetworkBlockedError:
        raise
    except (Exception, BaseExceptionGroup) as error:
        leaf = _leaf(error)
        if isinstance(leaf, NetworkBlockedError):
            raise leaf from None
        raise McpUnavailableError(
            f"{server.where()}: could not read its tools: {_describe(server, leaf)}"
        ) from None


def _block(block: Any) -> Any:
    if getattr(block, "type", None) == "text":
        return block.text
    return {"type": getattr(block, "type", "unknown"), "mime_type": getattr(block, "mime_type", None)}


def result_outcome(server: McpServer, tool: str, result: Any) -> dict[str, Any]:
    """The outcome of a ``CallToolResult`` (module doc), refused past ``max_result_bytes``."""
    blocks = [_block(block) for block in result.content]
    texts = [block for block in blocks if isinstance(block, str)]
    text = "\n".join(texts)
    try:
        size = len(json.dumps([blocks, result.structured_content], allow_nan=False).encode())
    except (TypeError, ValueError) as error:
        return {"status": REFUSED, "reason": f"tool {tool!r} of {server.where()}: not JSON: {error}"}
    if size > server.max_result_bytes:
        reason = (
            f"tool {tool!r} of {server.where()} returned {size} bytes, more than its limit of "
            f"{server.max_result_bytes} (max_result_bytes)"
        )
        return {"status": REFUSED, "reason": reason}
    if result.is_error:
        return {"status": TOOL_ERROR, "message": text or f"tool {tool!r} failed"}
    value = result.structured_content if result.structured_content is not None else text
    if result.structured_content is None and len(texts) != len(blocks):
        value = blocks
    return {"status": OK, "value": value, "text": text}


async def call_tool(
    server: McpServer,
    tool: str,
    arguments: dict[str, Any],
    *,
    seconds: float | None = None,
    on_progress: ProgressHook | None = None,
) -> dict[str, Any]:
    """Call ``tool`` once with ``arguments``; its outcome (module doc), never an exception but
    :class:`~agentloop.orchestration.errors.NetworkBlockedError` (a replay) and cancellation."""
    limit = server.call_seconds if seconds is None else min(seconds, server.call_seconds)
    try:
        async with asyncio.timeout(OPEN_SECONDS + limit):
            async with _client(server) as client:
                result = await client.call_tool(
                    tool, arguments, read_timeout_seconds=limit, progress_callback=on_progress
                )
                return result_outcome(server, tool, result)
    except NetworkBlockedError:
        raise
    except (Exception, BaseExceptionGroup) as error:
        return _error_outcome(server, tool, _leaf(error), limit)


def _error_outcome(server: McpServer, tool: str, error: BaseException, limit: float) -> dict[str, Any]:
    from mcp import MCPError

    if isinstance(error, NetworkBlockedError):
        raise error from None
    where = f"tool {tool!r} of {server.where()}"
    if isinstance(error, ValidationError):
        return {"status": REFUSED, "reason": f"{where} sent a malformed result: {_describe(server, error)}"}
    if isinstance(error, MCPError) and error.code in _ANSWER_CODES:
        return {"status": TOOL_ERROR, "message": server.hide(str(error))}
    if isinstance(error, TimeoutError):
        return {"status": UNAVAILABLE, "reason": f"{where} did not answer within {limit:g} s"}
    return {"status": UNAVAILABLE, "reason": f"{where}: {_describe(server, error)}"}

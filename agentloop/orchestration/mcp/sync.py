"""MCP tools' schemas in the ``AiTool`` table, like the typed steps' (``agentloop tools sync``).

A tool listed by a server (through its filter) is written under its action's name with the
marker of :mod:`agentloop.orchestration.store.tool_sync` (``generated_from: "mcp:<server>"``) and the
same rules: no row: ``created``; a generated row: ``unchanged``, or ``updated`` when the server's
schema changed; a row edited by hand wins (``kept``; ``drifted`` when it differs from what the
server lists; ``--force`` overwrites it). :func:`check_mcp_tools` (``--check``) writes nothing and
reports ``from the server`` (no row), ``unchanged`` or ``drifted`` (the server lists another
schema than the row, which is what a run offers the model: a changed schema is reported, never
used silently).

:func:`mcp_toolsets` finds a deployment's servers: the MCP actions of each registered loop's
registry (where it can be read without a context) and the :class:`McpServer` /
:class:`McpToolset` values its modules define.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from agentloop.loops.base import BaseAgentLoop
from agentloop.orchestration.mcp.servers import McpServer
from agentloop.orchestration.mcp.session import ListedTool
from agentloop.orchestration.mcp.tools import McpToolAction, McpToolset, listed_payload
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import ToolStore, validate_tool_payload
from agentloop.orchestration.store.tool_sync import (
    CREATED,
    DRIFTED,
    KEPT,
    MARKER,
    UNCHANGED,
    UPDATED,
    ToolSync,
    payload_hash,
)

logger = logging.getLogger(__name__)

#: What :func:`check_mcp_tools` found for a tool with no row: the server's schema is offered.
FROM_SERVER = "from the server"


def generated_payload(server: McpServer, tool: ListedTool) -> dict[str, Any]:
    payload = validate_tool_payload(listed_payload(server, tool))
    return {**payload, MARKER: {"generated_from": f"mcp:{server.name}", "sha256": payload_hash(payload)}}


def _hand_edited(row: dict[str, Any]) -> bool:
    marker = row.get(MARKER)
    return not isinstance(marker, dict) or marker.get("sha256") != payload_hash(row)


def _sync_one(store: ToolStore, server: McpServer, tool: ListedTool, *, force: bool, check: bool) -> ToolSync:
    tool_id, generated = server.action_name(tool.name), generated_payload(server, tool)
    row, source = store.get_payload(tool_id), f"mcp:{server.name}"

    def result(status: str, detail: str = "") -> ToolSync:
        return ToolSync(tool_id=tool_id, action=source, status=status, detail=detail)

    same = row is not None and payload_hash(row) == payload_hash(generated)
    if check:
        if row is None:
            return result(FROM_SERVER, "no row: the server's schema is offered")
        if same:
            return result(UNCHANGED)
        how = "edited by hand" if _hand_edited(row) else "generated from an older schema of the server"
        return result(DRIFTED, f"{how}; differs from what {server.where()} lists")
    if row is None:
        store.put(tool_id, generated)
        return result(CREATED)
    if _hand_edited(row) and not force:
        if same:
            return result(KEPT, "edited by hand; the same as the server's schema")
        return result(DRIFTED, f"edited by hand and differs from what {server.where()} lists; kept")
    if same and row.get(MARKER) == generated[MARKER]:
        return result(UNCHANGED)
    store.put(tool_id, generated)
    return result(UPDATED)


def sync_mcp_tools(
    store: ToolStore, toolsets: Iterable[McpToolset], *, force: bool = False, check: bool = False
) -> list[ToolSync]:
    """Write (``check``: compare) each listed tool's row (module doc); a server that cannot be
    read raises :class:`~agentloop.orchestration.errors.McpUnavailableError`."""
    results: list[ToolSync] = []
    for toolset in toolsets:
        tools = asyncio.run(toolset.tools())
        results.extend(_sync_one(store, toolset.server, tool, force=force, check=check) for tool in tools)
    return results


def mcp_toolsets(registry: RunnableRegistry, modules: Sequence[str] = ()) -> list[McpToolset]:
    """The MCP servers of a deployment (module doc), each once, in order."""
    found: dict[str, McpServer] = {}  # by name: a server's headers and env make it unhashable
    for name in registry.names:
        runnable = registry.get(name).runnable
        if isinstance(runnable, type) and issubclass(runnable, BaseAgentLoop):
            try:
                actions = list(runnable.create(context=None).registry)
            except Exception:  # the registry needs the real context: the module scan may still find it
                logger.info(
                    "the actions of %s need a context; not read from its registry", runnable.__qualname__
                )
                actions = []
            for action in actions:
                if isinstance(action, McpToolAction):
                    found.setdefault(action.server.name, action.server)
    for module_name in modules:
        for value in vars(importlib.import_module(module_name)).values():
            if isinstance(value, McpServer):
                found.setdefault(value.name, value)
            elif isinstance(value, McpToolset):
                found.setdefault(value.server.name, value.server)
    return [McpToolset(server) for server in found.values()]

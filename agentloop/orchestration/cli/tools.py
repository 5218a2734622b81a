"""``agentloop tools list|show|load|sync``: the ``AiTool`` table.

``sync`` writes the schemas the typed actions of ``AGENTLOOP_IMPORTS`` generate
(:mod:`agentloop.orchestration.store.tool_sync`), and those its MCP servers list
(:mod:`agentloop.orchestration.mcp.sync`); a row edited by hand wins, with a warning
when it has drifted from the generated one. ``sync --check`` writes nothing and
exits 1 when a row has drifted, listing it (a typed step needs no row).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from agentloop.orchestration.cli.common import (
    EXIT_FAILED,
    cli_settings,
    console,
    deployment_registry,
    errors,
    fail,
    json_option,
    print_json,
)
from agentloop.orchestration.errors import McpUnavailableError
from agentloop.orchestration.store import open_store, validate_tool_payload
from agentloop.orchestration.store.tool_sync import DRIFTED, check_tools, sync_tools, typed_actions

tools = typer.Typer(help="Tool schemas in the AiTool table (DATABASE_URL).", no_args_is_help=True)


@tools.command("list")
def list_tools(as_json: bool = json_option()) -> None:
    """Every tool: id, name and description (with ``--json``: and its payload)."""
    _, store = open_store()
    if as_json:
        print_json(
            [
                {"id": tool.id, "name": tool.name, "payload": tool.payload, "updated_at": tool.updated_at}
                for tool in store.list()
            ]
        )
        return
    table = Table("id", "name", "description", "updated")
    table.columns[0].no_wrap = True
    for tool in store.list():
        table.add_row(
            tool.id,
            tool.name,
            str(tool.payload.get("description", ""))[:60],
            tool.updated_at.strftime("%Y-%m-%d %H:%M"),
        )
    console.print(table)


@tools.command("show")
def show(tool_id: str = typer.Argument(..., help="The tool id."), as_json: bool = json_option()) -> None:
    """One tool's JSON payload."""
    _, store = open_store()
    payload = store.get_payload(tool_id)
    if payload is None:
        raise fail(f"no tool {tool_id!r}")
    if as_json:
        print_json(payload)
    else:
        console.print_json(json.dumps(payload))


def _entries(data: Any, source: Path) -> list[tuple[str, Any]]:
    if isinstance(data, dict) and "id" in data and "payload" in data:
        return [(str(data["id"]), data["payload"])]
    if isinstance(data, dict):
        return [(str(key), value) for key, value in data.items()]
    if isinstance(data, list) and all(isinstance(d, dict) and {"id", "payload"} <= set(d) for d in data):
        return [(str(d["id"]), d["payload"]) for d in data]
    raise fail(f"{source}: expected {{id: payload}}, {{'id', 'payload'}} or a list of those")


@tools.command("load")
def load(
    files: list[Path] = typer.Argument(..., exists=True, dir_okay=False, readable=True, help="JSON files."),
    as_json: bool = json_option(),
) -> None:
    """Load tool schemas from JSON files; every payload is validated before anything is written."""
    entries: list[tuple[str, dict[str, Any]]] = []
    for source in files:
        try:
            data = json.loads(source.read_text())
        except ValueError as error:
            raise fail(f"{source}: not valid JSON: {error}") from None
        for tool_id, payload in _entries(data, source):
            try:
                entries.append((tool_id, validate_tool_payload(payload)))
            except ValueError as error:
                raise fail(f"{source}: tool {tool_id!r}: {error}") from None
    _, store = open_store()
    for tool_id, payload in entries:
        store.put(tool_id, payload)
    if as_json:
        print_json({"loaded": [tool_id for tool_id, _ in entries]})
    else:
        console.print(f"loaded {len(entries)} tool(s): {', '.join(tool_id for tool_id, _ in entries)}")


def _mcp_toolsets(registry: Any, modules: Any) -> list[Any]:
    """The deployment's MCP servers, when the ``mcp`` extra is installed (none otherwise)."""
    try:
        from agentloop.orchestration.mcp.sync import mcp_toolsets
    except ImportError:  # pragma: no cover - the mcp extra is not installed
        return []
    return list(mcp_toolsets(registry, modules))


@tools.command("sync")
def sync(
    force: bool = typer.Option(False, "--force", help="Overwrite rows edited by hand too."),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when a row has drifted (for CI)."),
    check: bool = typer.Option(False, "--check", help="Write nothing; exit 1 when a row has drifted."),
    as_json: bool = json_option(),
) -> None:
    """Write the tool schemas the typed actions of AGENTLOOP_IMPORTS generate (rows edited by hand win)."""
    if check and force:
        raise fail("--check writes nothing: it cannot --force")
    settings = cli_settings()
    registry = deployment_registry(settings)
    actions = typed_actions(registry, settings.imports)
    servers = _mcp_toolsets(registry, settings.imports)
    _, store = open_store(settings.database_url)
    try:
        results = check_tools(store, actions) if check else sync_tools(store, actions, force=force)
        if servers:
            from agentloop.orchestration.mcp.sync import sync_mcp_tools

            results += sync_mcp_tools(store, servers, force=force, check=check)
    except (ValueError, McpUnavailableError) as error:
        raise fail(str(error)) from None
    finally:
        store.engine.dispose()
    if as_json:
        print_json(
            [
                {"tool_id": r.tool_id, "action": r.action, "status": r.status, "detail": r.detail}
                for r in results
            ]
        )
    else:
        table = Table("tool id", "action", "status")
        table.columns[0].no_wrap = True
        for result in results:
            style = "yellow" if result.status == DRIFTED else ""
            table.add_row(
                result.tool_id, result.action, f"[{style}]{result.status}[/]" if style else result.status
            )
        console.print(table if results else "no typed actions or MCP servers in AGENTLOOP_IMPORTS")
    for result in results:
        if result.status == DRIFTED:
            errors.print(
                f"[yellow]warning:[/] {escape(f'tool {result.tool_id!r}: {result.detail}')}", soft_wrap=True
            )
    if (strict or check) and any(result.status == DRIFTED for result in results):
        raise typer.Exit(EXIT_FAILED)

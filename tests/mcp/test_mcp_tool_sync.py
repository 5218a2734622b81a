"""MCP tools' schemas in the ``AiTool`` table (``agentloop tools sync``), with the typed steps'
drift check: a server whose schema changed is reported, and a run offers the row, never the
changed schema silently."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

from mcp_support import Calls

from agentloop.orchestration.mcp.servers import McpServer
from agentloop.orchestration.mcp.sync import FROM_SERVER, generated_payload, mcp_toolsets, sync_mcp_tools
from agentloop.orchestration.mcp.tools import McpToolset
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import InMemoryToolStore
from agentloop.orchestration.store.tool_sync import MARKER, payload_hash


def statuses(results: list) -> dict[str, str]:
    return {result.tool_id: result.status for result in results}


def test_sync_writes_each_listed_tool_then_finds_it_unchanged(http: tuple[McpServer, Calls]) -> None:
    server, calls = http
    store, toolsets = (
        InMemoryToolStore(),
        [McpToolset(McpServer.http("counting", server.url or "", include=("add", "lookup")))],
    )

    assert statuses(sync_mcp_tools(store, toolsets, check=True)) == {
        "add": FROM_SERVER,
        "lookup": FROM_SERVER,
    }
    assert statuses(sync_mcp_tools(store, toolsets)) == {"add": "created", "lookup": "created"}
    assert statuses(sync_mcp_tools(store, toolsets)) == {"add": "unchanged", "lookup": "unchanged"}
    row = store.get_payload("add")
    assert row is not None and row[MARKER]["generated_from"] == "mcp:counting"
    assert row["parameters"]["required"] == ["a", "b"]
    assert calls.names() == []  # reading schemas calls no tool


def test_a_schema_the_server_changed_is_reported_then_updated_and_a_hand_edit_wins(
    http: tuple[McpServer, Calls],
) -> None:
    server, _ = http
    toolsets = [McpToolset(McpServer.http("counting", server.url or "", include=("add", "lookup")))]
    store = InMemoryToolStore()
    older = {"name": "add", "description": "Add.", "parameters": {"type": "object", "properties": {}}}
    store.put("add", {**older, MARKER: {"generated_from": "mcp:counting", "sha256": payload_hash(older)}})
    store.put("lookup", {"name": "lookup", "description": "mine", "parameters": {"type": "object"}})

    checked = {r.tool_id: (r.status, r.detail) for r in sync_mcp_tools(store, toolsets, check=True)}
    assert checked["add"] == (
        "drifted",
        f"generated from an older schema of the server; differs from what {server.where()} lists",
    )
    assert checked["lookup"][0] == "drifted" and checked["lookup"][1].startswith("edited by hand")

    assert statuses(sync_mcp_tools(store, toolsets)) == {"add": "updated", "lookup": "drifted"}
    assert store.get_payload("lookup")["description"] == "mine"  # type: ignore[index]
    assert statuses(sync_mcp_tools(store, toolsets, force=True)) == {"add": "unchanged", "lookup": "updated"}


def test_the_servers_of_a_deployment_are_found_in_its_modules() -> None:
    module = types.ModuleType("mcp_deployment_for_the_test")
    module.SEARCH = McpServer.stdio("search", [sys.executable, "-c", "pass"])  # type: ignore[attr-defined]
    module.TOOLS = McpToolset(McpServer.http("remote", "http://127.0.0.1:9/mcp"))  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        found = mcp_toolsets(RunnableRegistry(), [module.__name__])
    finally:
        del sys.modules[module.__name__]

    assert [toolset.server.name for toolset in found] == ["search", "remote"]


def test_a_generated_row_carries_the_marker_over_its_content() -> None:
    from agentloop.orchestration.mcp.session import ListedTool

    server = McpServer.http("s", "http://127.0.0.1:9/mcp", prefix="s_")
    payload = generated_payload(server, ListedTool(name="t", description="d", parameters={"type": "object"}))

    assert payload["name"] == "s_t" and payload[MARKER]["sha256"] == payload_hash(payload)


def test_agentloop_tools_sync_writes_and_checks_the_servers_of_agentloop_imports(
    http: tuple[McpServer, Calls], tmp_path: Path
) -> None:
    server, calls = http
    (tmp_path / "mcp_deploy.py").write_text(
        "from agentloop import McpServer\n"
        f"COUNTING = McpServer.http('counting', {server.url!r}, include=('add',))\n"
    )
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "AGENTLOOP_HOME": str(tmp_path),
        "AGENTLOOP_IMPORTS": "mcp_deploy",
        "PYTHONPATH": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'tools.sqlite3'}",
    }

    def tools(*args: str) -> subprocess.CompletedProcess[str]:
        command = [str(Path(sys.executable).parent / "agentloop"), "tools", "sync", "--json", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    checked, synced, again = tools("--check"), tools(), tools("--check")

    assert checked.returncode == 0, checked.stderr
    assert [(r["tool_id"], r["status"]) for r in json.loads(checked.stdout)] == [("add", FROM_SERVER)]
    assert [(r["tool_id"], r["status"], r["action"]) for r in json.loads(synced.stdout)] == [
        ("add", "created", "mcp:counting")
    ]
    assert again.returncode == 0 and json.loads(again.stdout)[0]["status"] == "unchanged"
    assert calls.names() == []

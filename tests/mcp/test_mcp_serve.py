"""``agentloop mcp serve`` (issue 37, item 4), reached by an MCP client of the official SDK: over
stdio (the command started by the client) and Streamable HTTP (closed by default, tokens and
scopes of ``agentloop serve``). Each call is a run on the workers (the embedded defaults: the
in-memory broker and a worker thread in the served process)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
AGENTLOOP = str(Path(sys.executable).parent / "agentloop")


def serve_env(home: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "AGENTLOOP_HOME": str(home),
        "AGENTLOOP_IMPORTS": "serve_workflows",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]),
        **extra,
    }


async def test_over_stdio_a_call_is_a_run_with_its_progress_and_its_result(tmp_path: Path) -> None:
    server = StdioServerParameters(command=AGENTLOOP, args=["mcp", "serve"], env=serve_env(tmp_path))
    progress: list[Any] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    async with Client(server, cache=None) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        result = await client.call_tool("serve.doubles", {"n": 21}, progress_callback=on_progress)
        refused = await client.call_tool("serve.doubles", {"n": -1})
        waiting = await client.call_tool("serve.asks_first", {"input": None})

    assert set(tools) == {"serve.doubles", "serve.asks_first"}
    assert tools["serve.doubles"].input_schema["properties"]["n"]["maximum"] == 1000
    assert not result.is_error, result
    assert result.structured_content["status"] == "succeeded"
    assert result.structured_content["result"] == {"doubled": 42}
    assert len(progress) >= 3 and any("iteration" in str(message) for _, message in progress)
    assert refused.is_error and "the input does not fit" in refused.content[0].text
    body = waiting.structured_content
    assert body["status"] == "waiting" and body["questions"][0]["question"]["prompt"] == "ship it?"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def http_serve(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = serve_env(
        tmp_path, AGENTLOOP_HTTP_TOKENS="reader-token-0123456789:read,starter-token-0123456789:start+read"
    )
    process = subprocess.Popen(
        [AGENTLOOP, "mcp", "serve", "--http", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                assert time.monotonic() < deadline, "agentloop mcp serve --http did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(15)


def client_with(url: str, token: str | None) -> Client:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return Client(
        streamable_http_client(url, http_client=create_mcp_http_client(headers=headers)), cache=None
    )


async def test_over_http_it_is_closed_by_default_and_a_call_needs_the_start_scope(http_serve: str) -> None:
    import httpx

    async with httpx.AsyncClient(timeout=10) as http:
        bare = await http.post(http_serve, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        wrong = await http.post(http_serve, json={}, headers={"Authorization": "Bearer not-a-token-of-ours"})
    assert (bare.status_code, bare.json()) == (
        401,
        {"error": "a bearer token is required (Authorization: Bearer <token>)"},
    )
    assert wrong.status_code == 401
    with pytest.raises(BaseException):  # noqa: B017 - the SDK's client fails to open a session on a 401
        async with client_with(http_serve, None) as client:
            await client.list_tools()

    async with client_with(http_serve, "reader-token-0123456789") as client:
        refused = await client.call_tool("serve.doubles", {"n": 1})
    assert refused.is_error and "start" in refused.content[0].text

    async with client_with(http_serve, "starter-token-0123456789") as client:
        result = await client.call_tool("serve.doubles", {"n": 5})
    assert result.structured_content["result"] == {"doubled": 10}

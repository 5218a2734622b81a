"""The MCP workflows of the real-worker test (imported by the worker process too)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from agentloop.loops import ProceduralAgentLoop
from agentloop.orchestration.mcp.servers import McpServer
from agentloop.orchestration.mcp.tools import McpToolset
from agentloop.orchestration.registry import register

SERVER = str(Path(__file__).resolve().parent / "counting_server.py")


class AddsThenMayDie(ProceduralAgentLoop):
    """One iteration: calls the MCP tool ``add`` (a stdio server counting its calls in
    ``input["calls"]``), then, when the file ``input["arm"]`` exists, removes it and SIGKILLs its own
    process: killed after the call, before the loop's end. A second iteration ends the loop."""

    max_iterations = 3

    def create_initial_state(self, *, input: Any) -> Any:
        return {**input, "sum": None, "done": False}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        if state["sum"] is not None:
            return {**state, "done": True}
        server = McpServer.stdio(
            "counting", [sys.executable, SERVER, "stdio"], env={"MCP_COUNT_FILE": state["calls"]}
        )
        add = McpToolset(server).action("add")
        total = await add.run(arguments={"a": 20, "b": 22}, context=self.context)
        if os.path.exists(state["arm"]):  # noqa: ASYNC240 - a file the test writes
            os.remove(state["arm"])
            os.kill(os.getpid(), signal.SIGKILL)
        return {**state, "sum": total["result"]}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["done"])

    def build_result(self, *, state: Any) -> Any:
        return {"sum": state["sum"]}


register("mcp.adds_then_may_die", AddsThenMayDie)

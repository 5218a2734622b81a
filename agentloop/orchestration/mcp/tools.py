"""An MCP server's tools as actions: :class:`McpToolset` reads what a server offers,
:class:`McpToolAction` is one of its tools in an action registry.

An AI-driven loop offers the actions to the model like any other; a procedural loop calls one by
name (``perform_action``); a step uses its result, the tool's structured content when the server
sends one, else its text. A call:

- is answered from the branch's checkpoint when it was completed before the loop was resumed
  (``journal.py``), from the recording in a replay, and otherwise goes to the server (one session
  per call, ``session.py``), cut short by the run's deadline and cancellation (checked every
  :data:`CANCEL_POLL_SECONDS`) and the server's ``call_seconds``;
- is checked against the run's token budget first, and reported to the run as a step event
  (``mcp_call``, with the server's progress notifications as ``mcp_progress`` events) and a step
  in the metrics (``mcp:<server>``);
- ends as its outcome says: a value; :class:`~agentloop.orchestration.errors.McpToolError` for a
  tool that answered ``isError`` (an AI-driven loop shows the model a tool error); a
  :class:`~agentloop.orchestration.errors.McpResultRefusedError` for a result past the limit or
  malformed; for a server away, the server's ``on_outage`` policy: ``degrade`` reports the outage
  (the run ends ``degraded``) and raises :class:`~agentloop.orchestration.errors.McpUnavailableError`
  (a tool error for the model), ``fail`` raises it so that the run fails.

The tool list is read once per process per server and kept for the server's ``list_seconds``
(300 s by default); its schemas may live in the ``AiTool`` table (``agentloop tools sync``, see
``sync.py``): given a tool store, a row wins over the listed schema, and a listed schema that
differs from its row is logged once as drift, never used silently.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from agentloop.actions.base import BaseAgentAction
from agentloop.actions.degradation import TOOL_UNAVAILABLE, ModelFailurePolicy, report_model_failure
from agentloop.actions.errors import RunStoppedError
from agentloop.actions.recording import MCP_CALL, outside_call
from agentloop.actions.step_events import report_step_event
from agentloop.actions.typed import tool_content
from agentloop.actions.usage import check_budget, report_tool_call
from agentloop.loops.scope import RunScope, current_scope
from agentloop.orchestration.errors import (
    McpConfigError,
    McpResultRefusedError,
    McpToolError,
    McpUnavailableError,
)
from agentloop.orchestration.mcp.journal import CallJournal
from agentloop.orchestration.mcp.servers import McpServer
from agentloop.orchestration.mcp.session import (
    OK,
    REFUSED,
    TOOL_ERROR,
    UNAVAILABLE,
    ListedTool,
    call_tool,
    list_tools,
)
from agentloop.orchestration.metrics.record import step_ended
from agentloop.orchestration.store import ToolStore

logger = logging.getLogger(__name__)

#: How often a call in flight checks the run's cancellation and deadline.
CANCEL_POLL_SECONDS = 0.2
_drift_lock = threading.Lock()
_drift_told: set[tuple[str, str]] = set()


class McpToolAction(BaseAgentAction):
    """One tool of an MCP server, as an action (module doc)."""

    def __init__(self, server: McpServer, tool: ListedTool) -> None:
        self.server, self.tool = server, tool
        self.name = server.action_name(tool.name)
        self.description = tool.description or f"the tool {tool.name!r} of MCP server {server.name!r}"
        self._parameters = tool.parameters

    @property
    def parameters(self) -> dict[str, Any]:
        return dict(self._parameters)

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        journal = CallJournal.here(self.server.name, self.tool.name, arguments)
        kept = journal.load()
        if kept is not None:
            await report_step_event(
                action=self.name,
                phase="mcp_call",
                message=f"{self.tool.name}: {kept.get('status')} (kept from before the resume)",
                data={
                    "server": self.server.name,
                    "tool": self.tool.name,
                    "status": kept.get("status"),
                    "kept": True,
                },
            )
            return await self._settle(kept)
        request = {"server": self.server.name, "tool": self.tool.name, "arguments": arguments}
        outcome = await outside_call(MCP_CALL, request, lambda: self._call(arguments))
        if not isinstance(outcome, dict):
            outcome = {"status": REFUSED, "reason": f"not an outcome: {outcome!r}"}
        if outcome.get("status") in (OK, TOOL_ERROR, REFUSED):
            await journal.save(outcome)
        return await self._settle(outcome)

    async def _call(self, arguments: dict[str, Any]) -> dict[str, Any]:
        check_budget()  # a spent budget stops the run's steps, tool calls too
        scope = current_scope()
        if scope is not None:
            scope.check()

        async def progress(done: float, total: float | None, message: str | None) -> None:
            await report_step_event(
                action=self.name,
                phase="mcp_progress",
                message=message or "",
                data={"server": self.server.name, "tool": self.tool.name, "progress": done, "total": total},
            )

        began = time.monotonic()
        remaining = None if scope is None else scope.remaining()
        call = asyncio.ensure_future(
            call_tool(self.server, self.tool.name, arguments, seconds=remaining, on_progress=progress)
        )
        outcome = await self._watched(call, scope)
        report_tool_call()  # the run's usage counts it, as a model call's tokens (never a replayed one)
        seconds = time.monotonic() - began
        status = str(outcome.get("status"))
        step_ended(f"mcp:{self.server.name}", "completed" if status == OK else "failed", seconds)
        await report_step_event(
            action=self.name,
            phase="mcp_call",
            message=f"{self.tool.name}: {status}",
            data={
                "server": self.server.name,
                "tool": self.tool.name,
                "status": status,
                "seconds": round(seconds, 3),
            },
        )
        return outcome

    async def _watched(self, call: asyncio.Future[dict[str, Any]], scope: RunScope | None) -> dict[str, Any]:
        """``call``'s outcome, cancelled as soon as the run is cancelled or passes its deadline."""
        try:
            while True:
                done, _ = await asyncio.wait({call}, timeout=CANCEL_POLL_SECONDS)
                if scope is not None and (not done or call.result().get("status") == UNAVAILABLE):
                    scope.check()  # a deadline that cut the call short is the deadline's doing
                if done:
                    return call.result()
        except (RunStoppedError, asyncio.CancelledError):
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
            raise

    async def _settle(self, outcome: dict[str, Any]) -> Any:
        status = outcome.get("status")
        if status == OK:
            return outcome.get("value")
        if status == TOOL_ERROR:
            raise McpToolError(str(outcome.get("message") or f"tool {self.tool.name!r} failed"))
        if status == UNAVAILABLE:
            reason = str(outcome.get("reason") or f"{self.server.where()} was unavailable")
            fails = self.server.on_outage == ModelFailurePolicy.FAIL
            if not fails:
                await report_model_failure(action=self.name, reason=reason, kind=TOOL_UNAVAILABLE)
            raise McpUnavailableError(reason, fails_run=fails)
        raise McpResultRefusedError(str(outcome.get("reason") or "a refused result"))

    def __repr__(self) -> str:
        return f"<McpToolAction {self.name!r} of {self.server.where()}>"


class McpToolset:
    """The tools of one :class:`McpServer` that pass its filter, as actions (module doc)."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self._lock = threading.Lock()
        self._listed: tuple[float, list[ListedTool]] | None = None

    async def tools(self) -> list[ListedTool]:
        """The tools listed, read from the server when not read within ``list_seconds``."""
        with self._lock:
            listed = self._listed
        if listed is not None and time.monotonic() - listed[0] < self.server.list_seconds:
            return listed[1]
        tools = await list_tools(self.server)
        with self._lock:
            self._listed = (time.monotonic(), tools)
        return tools

    def forget(self) -> None:
        """Read the list from the server again next time."""
        with self._lock:
            self._listed = None

    async def load_actions(self, *, tool_store: ToolStore | None = None) -> list[McpToolAction]:
        """The actions (module doc): ``tool_store``'s row of a tool, when it has one, gives its schema."""
        return [self._action(tool, tool_store) for tool in await self.tools()]

    def actions(self, *, tool_store: ToolStore | None = None) -> list[McpToolAction]:
        """:meth:`load_actions` from synchronous code (a loop's ``registry``): inside a running event
        loop the list is read on a thread of its own."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.load_actions(tool_store=tool_store))
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agentloop-mcp") as pool:
            return pool.submit(asyncio.run, self.load_actions(tool_store=tool_store)).result()

    def action(self, tool: str, *, tool_store: ToolStore | None = None) -> McpToolAction:
        """The action of one tool by its name on the server."""
        for action in self.actions(tool_store=tool_store):
            if action.tool.name == tool:
                return action
        raise McpConfigError(f"{self.server.where()} offers no tool {tool!r} (or its filter leaves it out)")

    def _action(self, tool: ListedTool, tool_store: ToolStore | None) -> McpToolAction:
        tool_id = self.server.action_name(tool.name)
        row = None if tool_store is None else tool_store.get_payload(tool_id)
        if row is None:
            return McpToolAction(self.server, tool)
        listed = listed_payload(self.server, tool)
        if tool_content(row) != listed:
            with _drift_lock:
                told = (self.server.name, tool_id) in _drift_told
                _drift_told.add((self.server.name, tool_id))
            if not told:
                logger.warning(
                    "tool %r: %s lists a schema that differs from its AiTool row; the row is used "
                    "(agentloop tools sync updates a generated row, --check reports it)",
                    tool_id,
                    self.server.where(),
                )
        stored = ListedTool(
            name=tool.name,
            description=str(row.get("description") or tool.description),
            parameters=dict(row.get("parameters") or tool.parameters),
        )
        return McpToolAction(self.server, stored)


def listed_payload(server: McpServer, tool: ListedTool) -> dict[str, Any]:
    """A listed tool as an ``AiTool`` payload: ``{"name", "description", "parameters"}``."""
    return {
        "name": server.action_name(tool.name),
        "description": tool.description,
        "parameters": tool.parameters,
    }


def mcp_actions(*toolsets: McpToolset, tool_store: ToolStore | None = None) -> Sequence[McpToolAction]:
    """Every action of ``toolsets``, in order (for ``AgentActionRegistry([*mine, *mcp_actions(...)])``)."""
    return [action for toolset in toolsets for action in toolset.actions(tool_store=tool_store)]

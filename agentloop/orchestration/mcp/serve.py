"""``agentloop mcp serve``: the registered runnables (or a chosen set) as the tools of an MCP
server, over stdio or Streamable HTTP, on the official SDK's low-level ``Server``.

Each runnable is one tool, named as it is registered. Its input schema is the runnable's
``input_type`` (a class attribute: a pydantic model's fields are the tool's arguments; any other
type is the schema of one argument, ``input``); without one, ``input`` takes any JSON. Calling
the tool starts a durable run on the workers (``CeleryAgentRunner``, as ``agentloop trigger``
does), reports the run's events as MCP progress notifications while it runs (when the caller
asked for progress), and answers with the run's result as structured content:

- ``{"status": "succeeded" | "degraded", "run_id", "result"}``;
- ``{"status": "waiting", "run_id", "questions": [...]}`` when the run waits for a person (answer
  with ``agentloop resume RUN_ID --answer JSON`` or ``POST /runs/{id}/resume``); the call does not
  hold the connection meanwhile;
- an error result (``isError``) for a failed or stopped run, input the type refuses, or a caller
  the server refuses; never a traceback.

Closed by default over HTTP, like ``agentloop serve``: every request needs a bearer token of
``AGENTLOOP_HTTP_TOKENS`` (or ``AGENTLOOP_HTTP_ANONYMOUS_SCOPES``), refused with 401 before the MCP
layer sees it; calling a tool needs the ``start`` scope, and the run records the caller's
principal. Over stdio the caller is whoever started the process (no token).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.exceptions import HTTPException

from agentloop.actions.errors import AgentLoopError
from agentloop.actions.schema import tool_schema, validation_problems
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.errors import McpConfigError
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import RunStore
from agentloop.orchestration.store.waits import PENDING, wait_store_for
from agentloop.orchestration.web.auth import START, Authenticator

#: How often a call in flight reads its run's events and status.
POLL_SECONDS = 0.2
ANY_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {"input": {"description": "The run's input (any JSON)."}},
}

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


def _is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def input_schema(runnable: type) -> dict[str, Any]:
    """The tool's input schema: from the runnable's ``input_type`` (module doc)."""
    declared = getattr(runnable, "input_type", None)
    if declared is None:
        return dict(ANY_INPUT)
    if _is_model(declared):
        return tool_schema(declared)
    return {"type": "object", "properties": {"input": tool_schema(declared)}, "required": ["input"]}


def run_input(runnable: type, arguments: Mapping[str, Any]) -> Any:
    """The run's input from the tool's arguments, checked against ``input_type`` (``ValueError``)."""
    declared = getattr(runnable, "input_type", None)
    try:
        if isinstance(declared, type) and issubclass(declared, BaseModel):
            return declared.model_validate(dict(arguments)).model_dump(mode="json")
        value = arguments.get("input")
        if declared is not None:
            return TypeAdapter(declared).dump_python(
                TypeAdapter(declared).validate_python(value), mode="json"
            )
        return value
    except ValidationError as error:
        raise ValueError(f"the input does not fit: {validation_problems(error.errors())}") from None


class RunnableTools:
    """The tools of ``agentloop mcp serve`` (module doc): ``names`` of ``registry`` (all by default),
    each call a run on ``app``'s workers read back from ``store``."""

    def __init__(
        self,
        *,
        registry: RunnableRegistry,
        app: Any,
        store: RunStore,
        names: Sequence[str] = (),
        authenticator: Authenticator | None = None,
    ) -> None:
        for name in names:
            if name not in registry:
                raise McpConfigError(f"no runnable named {name!r}; registered: {', '.join(registry.names)}")
        self.registry, self.app, self.store, self.authenticator = registry, app, store, authenticator
        self.names = tuple(names) or registry.names

    def tools(self) -> list[Any]:
        import mcp_types

        tools = []
        for name in self.names:
            runnable = self.registry.get(name).runnable
            doc = (runnable.__doc__ or "").strip().split("\n\n")[0]
            tools.append(
                mcp_types.Tool(
                    name=name,
                    description=" ".join(doc.split()) or f"Start a run of {name!r} and return its result.",
                    input_schema=input_schema(runnable),
                )
            )
        return tools

    async def list_tools(self, ctx: Any, params: Any) -> Any:
        import mcp_types

        return mcp_types.ListToolsResult(tools=self.tools())

    async def call_tool(self, ctx: Any, params: Any) -> Any:
        name, arguments = params.name, dict(params.arguments or {})
        principal: str | None = None
        if self.authenticator is not None:
            headers = getattr(getattr(ctx, "request", None), "headers", None) or {}
            try:
                caller = self.authenticator.from_headers({k.lower(): v for k, v in dict(headers).items()})
                caller.require(START)
            except HTTPException as refused:  # 401 / 403
                return _error(f"refused: {refused.detail}")
            principal = caller.name
        if name not in self.names:
            return _error(f"no tool {name!r}; the tools are {', '.join(self.names)}")
        runnable = self.registry.get(name).runnable
        try:
            value = run_input(runnable, arguments)
        except ValueError as error:
            return _error(str(error))
        runner = CeleryAgentRunner.create(runnable=name, app=self.app, store=self.store)
        handle = await runner.request(input=value, principal=principal)
        return await self._follow(ctx, handle)

    async def _follow(self, ctx: Any, handle: Any) -> Any:
        seen = 0
        while True:
            done = await asyncio.to_thread(handle.result.ready)
            for event in await asyncio.to_thread(handle.new_events):
                seen += 1
                await ctx.session.report_progress(float(seen), None, event.message or event.phase)
            if done:
                break
            status = await asyncio.to_thread(lambda: handle.status)
            if status == "waiting":
                store = wait_store_for(self.store)
                waits = [] if store is None else store.waits(handle.run_id, status=PENDING)
                if waits:
                    body = {
                        "status": "waiting",
                        "run_id": handle.run_id,
                        "questions": [w.describe() for w in waits],
                    }
                    return _result(body)
            await asyncio.sleep(POLL_SECONDS)
        try:
            output = await handle.wait(timeout=30)
        except (AgentLoopError, TimeoutError) as error:
            return _error(f"run {handle.run_id} ended {type(error).__name__}: {error}")
        status = await asyncio.to_thread(lambda: handle.status)
        return _result({"status": status, "run_id": handle.run_id, "result": output})


def _result(body: dict[str, Any]) -> Any:
    import mcp_types

    text = json.dumps(body, default=str)
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=text)], structured_content=json.loads(text)
    )


def _error(message: str) -> Any:
    import mcp_types

    return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=message)], is_error=True)


def build_server(tools: RunnableTools) -> Any:
    """The SDK's low-level ``Server`` answering ``tools/list`` and ``tools/call`` with ``tools``."""
    from mcp.server import Server

    return Server("agentloop", on_list_tools=tools.list_tools, on_call_tool=tools.call_tool)


async def serve_stdio(tools: RunnableTools) -> None:
    """Serve over this process's stdin and stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    server = build_server(tools)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def http_app(tools: RunnableTools, authenticator: Authenticator, *, host: str = "127.0.0.1") -> Asgi:
    """The Streamable HTTP app at ``/mcp``, behind ``authenticator`` (closed by default: 401)."""
    tools.authenticator = authenticator
    inner: Asgi = build_server(tools).streamable_http_app(host=host)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            try:
                authenticator.from_headers(headers)
            except HTTPException as refused:  # 401: no token, an unknown one
                status = refused.status_code
                body = json.dumps({"error": refused.detail}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": status,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await inner(scope, receive, send)

    return app

"""``agentloop mcp serve``: the registered runnables as an MCP server's tools (the ``mcp`` extra).

``--stdio`` (the default) serves this process's stdin and stdout: an MCP client starts the
command. ``--http`` serves Streamable HTTP at ``/mcp`` on ``--host`` / ``--port``
(``AGENTLOOP_HTTP_HOST`` / ``AGENTLOOP_HTTP_PORT``), closed by default like ``agentloop serve``:
a bearer token of ``AGENTLOOP_HTTP_TOKENS`` is required, calling a tool needs the ``start`` scope.
``--tool NAME`` (repeatable) serves only those runnables. Each call is a run on the workers of
the Celery app (on the in-memory broker, a worker thread in this process).
"""

from __future__ import annotations

import asyncio

import typer

from agentloop.orchestration.cli.common import celery_app, cli_settings, errors, fail
from agentloop.orchestration.errors import McpConfigError

mcp = typer.Typer(help="MCP: the registered runnables as an MCP server's tools.", no_args_is_help=True)


@mcp.command("serve")
def serve(
    http: bool = typer.Option(
        False, "--http/--stdio", help="Streamable HTTP at /mcp, or stdio (the default)."
    ),
    host: str | None = typer.Option(None, help="HTTP: listen on this address (AGENTLOOP_HTTP_HOST)."),
    port: int | None = typer.Option(None, min=0, max=65535, help="HTTP: this port (AGENTLOOP_HTTP_PORT)."),
    tool: list[str] = typer.Option([], "--tool", help="Serve only this runnable (repeatable)."),
    worker: bool | None = typer.Option(
        None, "--worker/--no-worker", help="A worker thread in this process. Default: in-memory broker only."
    ),
) -> None:
    """Serve the registered runnables as MCP tools: each call starts a durable run."""
    try:
        from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
        from agentloop.orchestration.mcp.serve import RunnableTools, http_app, serve_stdio
        from agentloop.orchestration.web.auth import Authenticator
    except ImportError as missing:
        raise fail(f"{missing}: install agentloop[mcp,http]") from None
    settings = cli_settings()
    with celery_app(settings, start_worker=worker) as app:
        deps = dependencies_of(app)
        try:
            tools = RunnableTools(registry=deps.registry, app=app, store=deps.store, names=tuple(tool))
        except McpConfigError as error:
            raise fail(str(error)) from None
        if not http:
            asyncio.run(serve_stdio(tools))
            return
        import uvicorn

        listen = host or settings.http.host
        asgi = http_app(tools, Authenticator(settings.http), host=listen)
        if not settings.http.is_open:
            errors.print("agentloop mcp serve: no AGENTLOOP_HTTP_TOKENS: every request is refused (401)")
        uvicorn.Server(
            uvicorn.Config(asgi, host=listen, port=port or settings.http.port, access_log=False)
        ).run()

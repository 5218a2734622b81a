"""``agentloop serve``: the HTTP adapter and the run viewer, beside the Celery app.

On the embedded defaults (nothing set) it runs everything in one process: the
in-memory broker, a worker thread, the SQLite run store and the web server,
with the demo workflow registered, so ``agentloop serve`` and a browser are all
a newcomer needs. Without ``AGENTLOOP_HTTP_TOKENS`` it makes a one-off token for
this process and prints the viewer's address with it.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.markup import escape

from agentloop.orchestration.cli.common import celery_app, cli_settings, console, fail
from agentloop.orchestration.cli.demo import DEMO_MODULE
from agentloop.orchestration.redaction import redact_url
from agentloop.orchestration.settings import Settings
from agentloop.orchestration.store import database_url


def serve(
    host: str | None = typer.Option(
        None, help="Listen on this address. Default: AGENTLOOP_HTTP_HOST (127.0.0.1)."
    ),
    port: int | None = typer.Option(
        None, min=0, max=65535, help="Listen on this port. Default: AGENTLOOP_HTTP_PORT (8000)."
    ),
    worker: bool | None = typer.Option(
        None,
        "--worker/--no-worker",
        help="Run a worker thread in this process. Default: on the in-memory broker only.",
    ),
) -> None:
    """Serve runs over HTTP (GraphQL, JSON, Server-Sent Events) and the run viewer at /ui."""
    try:
        from agentloop.orchestration.web import create_web_app
        from agentloop.orchestration.web.server import run_server, uvicorn_config, with_session_token
    except ImportError as missing:
        raise fail(str(missing)) from None
    settings = cli_settings()
    if not settings.imports:
        settings = settings.model_copy(update={"imports": (DEMO_MODULE,)})
    settings, token = with_session_token(settings)
    with celery_app(settings, start_worker=worker) as app:
        web = create_web_app(celery_app=app, settings=settings)
        config = uvicorn_config(web, settings, host=host, port=port)
        for line in banner(app, settings, f"http://{config.host}:{config.port}", token):
            console.print(line, soft_wrap=True, highlight=False)
        run_server(config)


def banner(app: Any, settings: Settings, base: str, token: str | None) -> list[str]:
    """What ``agentloop serve`` prints when it starts: where it listens, and how to get in."""
    lines = [
        f"[bold]agentloop serve[/] on {base}  (Ctrl-C stops)",
        f"  broker   {escape(redact_url(str(app.conf.broker_url)))}",
        f"  database {escape(redact_url(database_url(settings)))}",
        f"  runnables from {escape(', '.join(settings.imports))}",
        f"  graphql  {base}/graphql   events  {base}/runs/<id>/events",
    ]
    if token is None:
        return [*lines, f"  viewer   {base}/ui/  (it asks for a token)"]
    return [
        *lines,
        f"  viewer   {base}/ui/#token={token}",
        f"  token    {token}  [dim](every scope, this process only; "
        "set AGENTLOOP_HTTP_TOKENS to choose your own)[/]",
    ]

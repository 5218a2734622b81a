"""``agentloop serve``: the HTTP adapter and the run viewer, beside the Celery app.

On the embedded defaults (nothing set) it runs everything in one process: the
in-memory broker, a worker thread, the SQLite run store and the web server,
with the demo workflow registered, so ``agentloop serve`` and a browser are all
a newcomer needs. Without ``AGENTLOOP_HTTP_TOKENS`` it makes a one-off token for
this process and prints the viewer's address with it.
"""

from __future__ import annotations

import typer
from rich.markup import escape

from orchestration.cli.common import celery_app, cli_settings, console, fail
from orchestration.cli.demo import DEMO_MODULE
from orchestration.redaction import redact_url
from orchestration.store import database_url


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
        from orchestration.web import create_web_app
        from orchestration.web.server import run_server, uvicorn_config, with_session_token
    except ImportError as missing:
        raise fail(str(missing)) from None
    settings = cli_settings()
    if not settings.imports:
        settings = settings.model_copy(update={"imports": (DEMO_MODULE,)})
    settings, token = with_session_token(settings)
    with celery_app(settings, start_worker=worker) as app:
        web = create_web_app(celery_app=app, settings=settings)
        config = uvicorn_config(web, settings, host=host, port=port)
        base = f"http://{config.host}:{config.port}"
        console.print(f"[bold]agentloop serve[/] on {base}  (Ctrl-C stops)")
        console.print(f"  broker   {escape(redact_url(str(app.conf.broker_url)))}")
        console.print(f"  database {escape(redact_url(database_url(settings)))}")
        console.print(f"  runnables from {escape(', '.join(settings.imports))}")
        console.print(f"  graphql  {base}/graphql   events  {base}/runs/<id>/events")
        if token is not None:
            console.print(f"  viewer   {base}/ui/#token={token}")
            console.print(
                f"  token    {token}  [dim](every scope, this process only; "
                "set AGENTLOOP_HTTP_TOKENS to choose your own)[/]"
            )
        else:
            console.print(f"  viewer   {base}/ui/  (it asks for a token)")
        run_server(config)

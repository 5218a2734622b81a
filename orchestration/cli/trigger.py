"""``agentloop trigger NAME --input JSON``: start a registered workflow on Celery."""

from __future__ import annotations

import json

import typer

from orchestration.celery_adapter.dependencies import dependencies_of
from orchestration.cli.common import (
    EXIT_FAILED,
    EXIT_TIMEOUT,
    celery_app,
    cli_settings,
    console,
    deployment_registry,
    fail,
    follow,
    parse_json,
)
from orchestration.client import CeleryAgentRunner, WorkflowFailedError
from orchestration.registry import UnknownRunnableError


def trigger(
    name: str = typer.Argument(..., help="A registered runnable (see AGENTLOOP_IMPORTS)."),
    input: str = typer.Option("null", "--input", "-i", help="The workflow's input, as JSON."),
    context: str | None = typer.Option(None, "--context", "-c", help="The context spec, a JSON object."),
    wait: bool = typer.Option(
        False, "--wait", "-w", help="Follow the run with a progress bar until it ends."
    ),
    timeout: float | None = typer.Option(None, min=0.1, help="With --wait: give up after this many seconds."),
) -> None:
    """Start NAME on Celery and print its run id (with --wait: follow it and print its result)."""
    payload = parse_json(input, what="--input")
    spec = parse_json(context, what="--context", default={})
    if not isinstance(spec, dict):
        raise fail("--context must be a JSON object")
    settings = cli_settings()
    registry = deployment_registry(settings)
    if settings.imports and name not in registry:
        raise fail(str(UnknownRunnableError(name, registry.names)))
    with celery_app(settings) as app:
        runner = CeleryAgentRunner.create(
            runnable=name, context=spec, app=app, store=dependencies_of(app).store
        )
        handle = runner.request_sync(input=payload)
        console.print(f"run id: [bold]{handle.run_id}[/]")
        if not wait:
            if str(app.conf.broker_url).startswith("memory://"):
                console.print("[yellow]the in-memory broker lives in this process: waiting for the run[/]")
            else:
                return
        try:
            result = follow(handle, timeout=timeout, title=name)
        except TimeoutError:
            raise fail(f"run {handle.run_id} still running after {timeout}s", code=EXIT_TIMEOUT) from None
        except (WorkflowFailedError, Exception) as error:
            raise fail(f"run {handle.run_id} failed: {error}", code=EXIT_FAILED) from None
        console.print_json(json.dumps(result, default=str))
        if handle.status == "degraded":  # it returned, but model calls failed on the way
            recorded = handle.error if isinstance(handle.error, dict) else {}
            console.print(f"[yellow]degraded[/]: {recorded.get('message', 'model calls failed')}")

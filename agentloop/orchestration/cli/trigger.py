"""``agentloop trigger NAME --input JSON``: start a registered workflow on Celery."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.markup import escape

from agentloop.loops.run_outcome import STOPPED_BY_BOUND
from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.cli.common import (
    EXIT_DEGRADED,
    EXIT_FAILED,
    EXIT_TIMEOUT,
    celery_app,
    cli_settings,
    console,
    deployment_registry,
    errors,
    fail,
    follow,
    parse_json,
    print_json,
)
from agentloop.orchestration.client import CeleryAgentRunner, RunHandle
from agentloop.orchestration.errors import LaunchRequestError, UnknownRunnableError
from agentloop.orchestration.settings.broker import Broker


def trigger(
    name: str = typer.Argument(..., help="A registered runnable (see AGENTLOOP_IMPORTS)."),
    input: str = typer.Option("null", "--input", "-i", help="The workflow's input, as JSON."),
    context: str | None = typer.Option(None, "--context", "-c", help="The context spec, a JSON object."),
    wait: bool = typer.Option(
        False, "--wait", "-w", help="Follow the run with a progress bar until it ends."
    ),
    timeout: float | None = typer.Option(None, min=0.1, help="With --wait: give up after this many seconds."),
    as_json: bool = typer.Option(
        False, "--json", help='Print {"run_id"} (with --wait: and "status", "result") as JSON on stdout.'
    ),
    record: bool = typer.Option(
        False, "--record", help="Record the run for `agentloop replay` and `agentloop runs export`."
    ),
    run_id: str | None = typer.Option(None, "--run-id", help="The run's id (default: a new one)."),
) -> None:
    """Start NAME on Celery and print its run id (with --wait: follow it and print its result; a
    run that ended degraded exits 4)."""
    if timeout is not None and not wait:
        raise fail("--timeout needs --wait: it bounds how long the run is followed")
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
        try:
            handle = runner.request_sync(input=payload, record=record, run_id=run_id)
        except LaunchRequestError as error:
            raise fail(str(error)) from None
        if not as_json:
            console.print(f"run id: [bold]{handle.run_id}[/]")
        if not wait:
            if not Broker.of(str(app.conf.broker_url)).in_process:
                if as_json:
                    print_json({"run_id": handle.run_id})
                return
            (errors if as_json else console).print(
                "[yellow]the in-memory broker lives in this process: waiting for the run[/]"
            )
        result = _wait(handle, name=name, timeout=timeout, as_json=as_json)
        stopped_by, status = _stopped_by(handle), _status(handle)
        if as_json:
            print_json(
                {"run_id": handle.run_id, "status": status, "result": result, "stopped_by": stopped_by}
            )
        else:
            console.print_json(json.dumps(result, default=str))
            if stopped_by == STOPPED_BY_BOUND:  # it returned, but a loop hit its max_iterations first
                console.print(
                    "[yellow]stopped by its bound[/]: a loop hit its max_iterations before it was complete"
                )
        if status == "degraded":  # it returned, but model calls failed on the way: not a success
            if not as_json:
                recorded = handle.error if isinstance(handle.error, dict) else {}
                message = recorded.get("message", "model calls failed")
                console.print(f"[yellow]degraded[/]: {escape(str(message))}")  # wrapped at words
            raise typer.Exit(EXIT_DEGRADED)


def _wait(handle: RunHandle, *, name: str, timeout: float | None, as_json: bool) -> Any:
    """The run's result; a failed or timed-out run exits 1 or 3 (with its JSON first, under ``--json``)."""
    try:
        return follow(handle, timeout=timeout, title=name, quiet=as_json)
    except TimeoutError:
        if as_json:  # the run as JSON is the error
            print_json(
                {"run_id": handle.run_id, "status": "running", "error": f"still running after {timeout}s"}
            )
            raise typer.Exit(EXIT_TIMEOUT) from None
        raise fail(f"run {handle.run_id} still running after {timeout}s", code=EXIT_TIMEOUT) from None
    except Exception as error:
        if as_json:
            print_json({"run_id": handle.run_id, "status": _status(handle, "failed"), "error": str(error)})
            raise typer.Exit(EXIT_FAILED) from None
        raise fail(f"run {handle.run_id} failed: {error}", code=EXIT_FAILED) from None


def _stopped_by(handle: RunHandle) -> str:
    """How the run ended: ``"bound"`` when a loop of it hit its ``max_iterations`` first, else
    ``"complete"`` (the run's record says; without a store, its events)."""
    record = handle.store.get_run(handle.run_id) if handle.store is not None else None
    if record is not None and record.stopped_by is not None:
        return record.stopped_by
    return handle.stopped_by


def _status(handle: RunHandle, default: str = "succeeded") -> str:
    """The run's status in the store (``degraded``, ``cancelled``, ...); ``default`` without a record."""
    record = handle.store.get_run(handle.run_id) if handle.store is not None else None
    return record.status if record is not None else default

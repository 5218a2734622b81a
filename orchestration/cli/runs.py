"""``agentloop runs list|show|watch``: the run store, read."""

from __future__ import annotations

import json
import time

import typer
from rich.table import Table

from loops.progress import ProgressEvent
from orchestration.cli.common import EXIT_USAGE, cli_settings, console, describe_event, fail, run_store
from orchestration.store import TERMINAL_STATUSES

runs = typer.Typer(help="Runs recorded in the run store (DATABASE_URL).", no_args_is_help=True)


@runs.command("list")
def list_runs(
    limit: int = typer.Option(20, min=1, max=1000, help="How many of the latest runs."),
    status: str | None = typer.Option(None, help="Only runs in this status (running, degraded, ...)."),
) -> None:
    """The latest runs, newest first."""
    table = Table("run id", "runnable", "status", "tokens in/out", "created", "finished")
    for record in run_store(cli_settings()).list_runs(limit=limit, status=status):
        table.add_row(
            record.id,
            record.runnable,
            record.status,
            f"{record.input_tokens}/{record.output_tokens}",
            record.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            record.finished_at.strftime("%H:%M:%S") if record.finished_at else "",
        )
    console.print(table)


@runs.command("show")
def show(run_id: str = typer.Argument(..., help="The run id (the launch task id).")) -> None:
    """One run: its record, result or error, and its progress events."""
    store = run_store(cli_settings())
    record = store.get_run(run_id)
    if record is None:
        raise fail(f"no run {run_id!r} in the run store", code=EXIT_USAGE)
    console.print_json(json.dumps(record.to_dict(), default=str))
    for _, event in store.events(run_id):
        console.print(describe_event(ProgressEvent.from_dict(event)), highlight=False)


@runs.command("watch")
def watch(
    run_id: str = typer.Argument(..., help="The run id."),
    poll: float = typer.Option(0.5, min=0.05, help="Seconds between looks at the store."),
) -> None:
    """Print a run's events as they come, until it ends."""
    store = run_store(cli_settings())
    if store.get_run(run_id) is None:
        raise fail(f"no run {run_id!r} in the run store", code=EXIT_USAGE)
    after = 0
    while True:
        for event_id, event in store.events(run_id, after_id=after):
            after = event_id
            console.print(describe_event(ProgressEvent.from_dict(event)), highlight=False)
        record = store.get_run(run_id)
        if record is not None and record.status in TERMINAL_STATUSES:
            console.print(f"[bold]{record.status}[/]")
            return
        time.sleep(poll)

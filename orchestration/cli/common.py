"""What the CLI commands share: JSON in and out, the stores, the Celery app, live progress.

Every command that prints something takes ``--json``: then stdout holds only
JSON (one document, or one per line for a stream of events), for scripts;
messages and progress go to stderr. Exit codes are the same either way
(:data:`EXIT_FAILED`, :data:`EXIT_USAGE`, :data:`EXIT_TIMEOUT`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from agentloop.loops.progress import ProgressEvent, ProgressStatus
from agentloop.orchestration.errors import SettingsError
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.settings import Settings, load_settings
from agentloop.orchestration.store import RunStore, open_store

console = Console()
errors = Console(stderr=True)

#: Exit codes: 0 done, 1 the run failed or was stopped, 2 bad input, 3 timed out.
EXIT_FAILED, EXIT_USAGE, EXIT_TIMEOUT = 1, 2, 3


def fail(message: str, *, code: int = EXIT_USAGE) -> typer.Exit:
    errors.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


#: ``--json``, the same on every command.
JSON_HELP = "Print JSON on stdout for scripts (messages go to stderr)."


def json_option() -> Any:
    """The ``--json`` option."""
    return typer.Option(False, "--json", help=JSON_HELP)


def print_json(value: Any) -> None:
    """``value`` as one line of JSON on stdout: never wrapped, coloured or cut, whatever the width."""
    typer.echo(json.dumps(value, default=str, ensure_ascii=False))


def parse_json(text: str | None, *, what: str, default: Any = None) -> Any:
    """``text`` as JSON, or a clear usage error naming the option."""
    if text is None:
        return default
    try:
        return json.loads(text)
    except ValueError as error:
        raise fail(f"{what} is not valid JSON: {error}") from None


def cli_settings() -> Settings:
    """The environment's settings, or a usage error naming the malformed variable."""
    try:
        return load_settings()
    except SettingsError as error:
        raise fail(str(error)) from None


def deployment_registry(settings: Settings) -> RunnableRegistry:
    """The runnables the modules in ``settings.imports`` (``AGENTLOOP_IMPORTS``) declare."""
    registry = RunnableRegistry()
    for name in settings.imports:
        try:
            registry.include_module(name)
        except ImportError as error:
            raise fail(f"AGENTLOOP_IMPORTS names {name!r}, which cannot be imported: {error}") from None
    return registry


def run_store(settings: Settings) -> RunStore:
    """The run store on ``settings.database_url`` (migrated to the latest schema)."""
    store, _ = open_store(settings.database_url)
    return store


@contextmanager
def celery_app(settings: Settings, *, start_worker: bool | None = None) -> Iterator[Any]:
    """The app for ``settings``; on the in-memory broker, with a worker thread in this process."""
    from agentloop.orchestration.celery_adapter.app import create_app

    app = create_app(settings=settings)
    in_memory = str(app.conf.broker_url).startswith("memory://")
    try:
        if start_worker or (start_worker is None and in_memory):
            from agentloop.orchestration.celery_adapter.embedded import embedded_worker

            with embedded_worker(app, pool="threads", concurrency=4, loglevel="ERROR"):
                yield app
        else:
            yield app
    finally:
        app.close()


def describe_event(event: ProgressEvent) -> str:
    """One line for an event, safe to print as rich markup (its text is escaped)."""
    where = event.path or "root"
    return escape(f"{event.runnable} ({where}) {event.phase}: {event.message}")


def follow(handle: Any, *, timeout: float | None, title: str = "running", quiet: bool = False) -> Any:
    """Wait for ``handle``'s result with a live progress bar of the run's steps (on stderr when ``quiet``).

    Every runnable in the workflow (each loop, stage, branch) is a step; the
    bar shows how many have finished of those started so far.
    """
    started: set[str] = set()
    finished: set[str] = set()
    deadline = None if timeout is None else time.monotonic() + timeout
    columns = (
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}", style="dim"),
    )
    with Progress(*columns, console=errors if quiet else console, transient=quiet) as bar:
        task = bar.add_task(title, total=None, last="")
        while True:
            done = handle.result.ready()
            for event in handle.new_events():
                if event.status is ProgressStatus.STARTED:
                    started.add(event.path)
                elif event.status in (ProgressStatus.COMPLETED, ProgressStatus.FAILED):
                    finished.add(event.path)
                bar.update(
                    task, total=max(len(started), 1), completed=len(finished), last=describe_event(event)[:80]
                )
            if done:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError
            time.sleep(0.1)
    return handle._outcome()

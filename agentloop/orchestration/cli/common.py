"""What the CLI commands share: JSON in and out, the stores, the Celery app, live progress.

Every command that prints something takes ``--json``: then stdout holds only
JSON (one document, or one per line for a stream of events), for scripts;
messages and progress go to stderr, and an error is one JSON object on stdout,
``{"error": "...", "exit_code": 2}`` (:func:`fail`, :class:`JsonErrorsGroup`). Exit codes
are the same either way (:data:`EXIT_FAILED`, :data:`EXIT_USAGE`, :data:`EXIT_TIMEOUT`,
:data:`EXIT_DEGRADED`).

The default store is under the per-user home (``AGENTLOOP_HOME``); a store left in the
working folder's ``./.agentloop/`` by an earlier version is pointed out on stderr, with how to
move it or read it (:func:`legacy_store`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import typer
from rich.console import Console, RenderableType
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from agentloop.loops.progress import ProgressEvent, ProgressStatus
from agentloop.orchestration.errors import SettingsError
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.settings import Settings, load_settings
from agentloop.orchestration.settings.broker import Broker
from agentloop.orchestration.store import RunStore, open_store

console = Console()
errors = Console(stderr=True)

#: Exit codes: 0 done, 1 the run failed or was stopped, 2 bad input, 3 timed out, 4 the run
#: returned but ended ``degraded`` (model calls failed and fallbacks answered).
EXIT_FAILED, EXIT_USAGE, EXIT_TIMEOUT, EXIT_DEGRADED = 1, 2, 3, 4


#: Click's base of the errors it reports itself (a usage error, a bad option value), whichever click
#: typer runs on (its own copy since typer 0.16, the ``click`` package before).
_CLICK_ERROR: type[Exception] = next(
    error for error in typer.BadParameter.__mro__ if error.__name__ == "ClickException"
)
#: Whether the command line being run asked for ``--json`` (set by :class:`JsonErrorsGroup`).
_json_errors: ContextVar[bool] = ContextVar("agentloop_cli_json_errors", default=False)


def fail(message: str, *, code: int = EXIT_USAGE) -> typer.Exit:
    """The exit for an error: said on stderr, or under ``--json`` as one JSON object on stdout."""
    if _json_errors.get():
        print_json({"error": message, "exit_code": code})
    else:
        errors.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


class JsonErrorsGroup(TyperGroup):
    """The ``agentloop`` command group: under ``--json``, errors (click's usage errors too) are JSON
    on stdout, with their non-zero exit code."""

    def main(self, args: Sequence[str] | None = None, *more: Any, **options: Any) -> Any:
        given = list(sys.argv[1:] if args is None else args)
        token = _json_errors.set("--json" in given)
        try:
            with working_folder_first():
                return super().main(given, *more, **options)
        finally:
            _json_errors.reset(token)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _CLICK_ERROR as error:
            if not _json_errors.get():
                raise
            failure: Any = error
            raise fail(failure.format_message(), code=failure.exit_code) from None


@contextmanager
def working_folder_first() -> Iterator[None]:
    """The working folder first on ``sys.path`` while a command runs, as ``celery`` puts it (and
    ``python -m``), so that the modules a command imports by name (``AGENTLOOP_IMPORTS``,
    ``--scorer MODULE:NAME``, on the embedded worker too) are found in the folder it is run from: a
    console script's path starts with its own ``bin`` instead. Taken off again at the end (for a
    command run in-process, as by click's test runner)."""
    try:
        folder = os.getcwd()
    except FileNotFoundError:  # the working folder was deleted under the shell: nothing to add
        folder = ""
    if not folder or folder in sys.path:
        yield
        return
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        with suppress(ValueError):  # taken off already by the command
            sys.path.remove(folder)


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
    """The environment's settings, or a usage error naming the malformed variable (a store an
    earlier version left in ``./.agentloop/`` is pointed out on stderr)."""
    try:
        settings = load_settings()
    except SettingsError as error:
        raise fail(str(error)) from None
    legacy = legacy_store(settings)
    if legacy is not None:
        errors.print(
            f"note: {legacy} holds runs of the old default home (./.agentloop); the store is now "
            f"{settings.home / legacy.name}. Move it there (mv .agentloop/{legacy.name}* "
            f"{settings.home}/) or read it with AGENTLOOP_HOME=.agentloop",
            markup=False,
            soft_wrap=True,
        )
    return settings


#: Where the store lived by default before the per-user home: ``./.agentloop`` of the working folder.
LEGACY_HOME = Path(".agentloop")


def legacy_store(settings: Settings) -> Path | None:
    """The SQLite file of ``./.agentloop/`` when it exists and is not the store ``settings`` use:
    left by an earlier version, whose default home was the working folder's (``None`` when
    ``AGENTLOOP_HOME`` or ``DATABASE_URL`` is set: whoever set them chose)."""
    if {"home", "database_url"} & settings.model_fields_set:
        return None
    legacy = (LEGACY_HOME / "agentloop.sqlite3").resolve()
    current = (settings.home / legacy.name).resolve()
    return legacy if legacy.is_file() and legacy != current else None


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


def _run_failures_said_once(record: logging.LogRecord) -> bool:
    """Celery's ``Task ... raised unexpected`` line and traceback, left out on the embedded worker:
    the run's failure is recorded, and the command says it in its one ``error:`` line."""
    return "raised unexpected" not in record.getMessage()


@contextmanager
def celery_app(settings: Settings, *, start_worker: bool | None = None) -> Iterator[Any]:
    """The app for ``settings``; on the in-memory broker, with a worker thread in this process."""
    from agentloop.orchestration.celery_adapter.app import create_app

    app = create_app(settings=settings)
    in_memory = Broker.of(str(app.conf.broker_url)).in_process
    try:
        if start_worker or (start_worker is None and in_memory):
            from agentloop.orchestration.celery_adapter.embedded import embedded_worker

            trace = logging.getLogger("celery.app.trace")
            trace.addFilter(_run_failures_said_once)
            try:
                with embedded_worker(app, pool="threads", concurrency=4, loglevel="ERROR"):
                    yield app
            finally:
                trace.removeFilter(_run_failures_said_once)
        else:
            yield app
    finally:
        app.close()


def print_table(table: Table, *, title: str | None = None) -> None:
    """``table`` on stdout when it fits the terminal whole (no cell wrapped); else each row as a
    block of ``column  value`` lines, so no id, name or hash is ever cut or broken mid-word."""
    table.title = table.title or title
    if Measurement.get(console, console.options.update_width(10_000), table).maximum <= console.width:
        for column in table.columns:
            column.no_wrap = True
        console.print(table)
        return
    if table.title:
        console.print(Text(str(table.title), style="bold"))
    names = [str(column.header) for column in table.columns]
    cells = [list(column.cells) for column in table.columns]
    rows = len(cells[0]) if cells else 0
    width = max((len(name) for name in names[1:]), default=0)
    for row in range(rows):
        first = cells[0][row]
        console.print(first if isinstance(first, Text) else Text(str(first)), soft_wrap=False)
        for name, values in zip(names[1:], cells[1:], strict=True):
            value = values[row]
            line = Text(f"  {name:<{width}}  ")
            line.append_text(value if isinstance(value, Text) else Text(str(value)))
            console.print(line)


#: How much of the last event the progress bar shows (a reason is a line or two, never a page).
MAX_EVENT_CHARS = 400


def describe_event(event: ProgressEvent) -> str:
    """One line for an event, safe to print as rich markup (its text is escaped)."""
    where = event.path or "root"
    return escape(f"{event.runnable} ({where}) {event.phase}: {event.message}")


def progress_bar(*, quiet: bool, last_event: bool = False) -> Progress:
    """The commands' progress bar: a spinner, the title, the bar, done of total and the time (and,
    with ``last_event``, the task's ``last`` field); on stderr, and gone when done, when ``quiet``."""
    columns = [
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    ]
    kind = _EventProgress if last_event else Progress
    return kind(*columns, console=errors if quiet else console, transient=quiet)


class _EventProgress(Progress):
    """The bar on its line and each task's ``last`` event on the lines below it, wrapped at
    words: at any width the runnable, the step and the reason are shown whole."""

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        for task in self.tasks:
            last = task.fields.get("last")
            if last:
                yield Text.from_markup(f"  {last}", style="dim")


def follow(handle: Any, *, timeout: float | None, title: str = "running", quiet: bool = False) -> Any:
    """Wait for ``handle``'s result with a live progress bar of the run's steps (on stderr when ``quiet``).

    Every runnable in the workflow (each loop, stage, branch) is a step; the
    bar shows how many have finished of those started so far.
    """
    started: set[str] = set()
    finished: set[str] = set()
    deadline = None if timeout is None else time.monotonic() + timeout
    with progress_bar(quiet=quiet, last_event=True) as bar:
        task = bar.add_task(title, total=None, last="")
        while True:
            done = handle.result.ready()
            for event in handle.new_events():
                if event.status is ProgressStatus.STARTED:
                    started.add(event.path)
                elif event.status in (ProgressStatus.COMPLETED, ProgressStatus.FAILED):
                    finished.add(event.path)
                last = describe_event(event)
                bar.update(
                    task, total=max(len(started), 1), completed=len(finished), last=last[:MAX_EVENT_CHARS]
                )
            if done:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError
            time.sleep(0.1)
    return handle._outcome()

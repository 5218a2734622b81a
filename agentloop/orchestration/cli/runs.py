"""``agentloop runs list|show|watch|export|import|prune``: the run store, read, its recordings
carried, and pruned.

Run ids are printed whole, whatever the terminal's width, so they can be
copied into ``runs show``: on a narrow terminal the step-cache use, the finish
time, the tokens and the creation time give way first. ``--wide`` prints every column whole,
``--json`` prints JSON for scripts.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from agentloop.loops.progress import ProgressEvent
from agentloop.orchestration.cli.common import (
    EXIT_USAGE,
    cli_settings,
    console,
    describe_event,
    errors,
    fail,
    json_option,
    print_json,
    run_store,
)
from agentloop.orchestration.replay import RunRecording
from agentloop.orchestration.settings.store import age_seconds
from agentloop.orchestration.store import TERMINAL_STATUSES, RunRecord, RunStatus
from agentloop.orchestration.store.retention import prune_runs

runs = typer.Typer(help="Runs recorded in the run store (DATABASE_URL).", no_args_is_help=True)


#: The columns of ``runs list``, and the order in which they give way on a narrow terminal.
COLUMNS = (
    "run id",
    "runnable",
    "status",
    "key",
    "tokens in/out",
    "cache hit/miss",
    "tool calls",
    "created",
    "finished",
)
_GIVE_WAY = ("cache hit/miss", "finished", "key", "tokens in/out", "created")
#: The columns of ``runs list --keys``: each concurrency key's runs by place.
KEY_COLUMNS = (
    "key", "in flight", "waiting", "waits", "refused", "cancelled for room", "branches in flight",
    "branches waiting",
)  # fmt: skip


def _cells(record: RunRecord, key: str | None = None) -> dict[str, str]:
    return {
        "run id": record.id,
        "runnable": record.runnable,
        "status": record.status,
        "key": key or "",
        "tokens in/out": f"{record.input_tokens}/{record.output_tokens}",
        "cache hit/miss": f"{record.cache_hits}/{record.cache_misses}"
        + (f" ({record.tokens_saved} saved)" if record.tokens_saved else ""),
        "tool calls": str(record.tool_calls),
        "created": record.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        "finished": record.finished_at.strftime("%H:%M:%S") if record.finished_at else "",
    }


def runs_table(
    records: list[RunRecord], columns: tuple[str, ...] = COLUMNS, keys: dict[str, str] | None = None
) -> Table:
    """The runs as a table of ``columns`` (``keys``: each run's concurrency key); ids are never
    wrapped or cut."""
    table = Table()
    for column in columns:
        table.add_column(column, no_wrap=column == "run id", overflow="fold")
    for record in records:
        cells = _cells(record, (keys or {}).get(record.id))
        table.add_row(*(cells[column] for column in columns))
    return table


def _keys_of(store: Any, records: list[RunRecord]) -> dict[str, str]:
    """Each listed run's concurrency key (``store/concurrency.py``), when the store keeps them."""
    slots = getattr(store, "concurrency", None)
    return slots.keys_of([record.id for record in records]) if slots is not None else {}


def key_rows(store: Any) -> list[dict[str, Any]]:
    """Every concurrency key's runs in flight, waiting, the waits they made, refused and cancelled
    to make room, and its branches holding a branch slot and waiting for one (a pack's counted as
    its branches), the busiest key first."""
    slots = getattr(store, "concurrency", None)
    counts = slots.counts() if slots is not None else {}
    rows = [
        {"key": key, "in_flight": c.held, "waiting": c.waiting, "waits": c.waits, "refused": c.refused,
         "evicted": c.evicted, "branches_in_flight": c.branches_held, "branches_waiting": c.branches_waiting}
        for key, c in counts.items()
    ]  # fmt: skip
    return sorted(rows, key=lambda row: (-row["in_flight"], -row["waiting"], row["key"]))


def _width(table: Table, *, within: int = 100_000) -> int:
    return Measurement.get(console, console.options.update(width=within), table).maximum


def fitted_table(records: list[RunRecord], keys: dict[str, str] | None = None) -> Table:
    """The table at the terminal's width: the least needed columns give way before an id is cut."""
    columns: tuple[str, ...] = COLUMNS
    for column in _GIVE_WAY:
        if _width(runs_table(records, columns, keys)) <= console.width:
            break
        columns = tuple(name for name in columns if name != column)
    return runs_table(records, columns, keys)


@runs.command("list")
def list_runs(
    limit: int = typer.Option(20, min=1, max=1000, help="How many of the latest runs."),
    status: str | None = typer.Option(None, help="Only runs in this status (running, degraded, ...)."),
    wide: bool = typer.Option(False, "--wide", "-w", help="Every column whole, however wide the table."),
    keys: bool = typer.Option(
        False, "--keys", help="Each concurrency key's runs and branches in flight, waiting, instead."
    ),
    as_json: bool = json_option(),
) -> None:
    """The latest runs, newest first, with each run's concurrency key (``--keys``: the keys)."""
    statuses = [value.value for value in RunStatus]
    if status is not None and status not in statuses:
        raise fail(f"--status {status!r} is no run status; one of: {', '.join(statuses)}")
    store = run_store(cli_settings())
    if keys:
        rows = key_rows(store)
        if as_json:
            print_json(rows)
            return
        table = Table()
        for column in KEY_COLUMNS:
            table.add_column(column, no_wrap=column == "key", overflow="fold")
        for row in rows:
            table.add_row(row["key"], *(str(value) for name, value in row.items() if name != "key"))
        if wide:  # as wide as the table needs, not the terminal
            Console(width=max(_width(table), console.width), no_color=console.no_color).print(table)
        else:
            console.print(table)
        return
    records = store.list_runs(limit=limit, status=status)
    run_keys = _keys_of(store, records)
    if as_json:
        print_json([{**record.to_dict(), "concurrency_key": run_keys.get(record.id)} for record in records])
        return
    if wide:  # as wide as the table needs, not the terminal
        table = runs_table(records, keys=run_keys)
        Console(width=max(_width(table), console.width), no_color=console.no_color).print(table)
    else:
        console.print(fitted_table(records, run_keys))


def _record(run_id: str) -> tuple[Any, RunRecord]:
    store = run_store(cli_settings())
    record = store.get_run(run_id)
    if record is None:
        raise fail(f"no run {run_id!r} in the run store", code=EXIT_USAGE)
    return store, record


@runs.command("show")
def show(
    run_id: str = typer.Argument(..., help="The run id (the launch task id)."),
    as_json: bool = json_option(),
) -> None:
    """One run: its record, result or error, and its progress events."""
    store, record = _record(run_id)
    events = [event for _, event in store.events(run_id)]
    if as_json:
        print_json({"run": record.to_dict(), "events": events})
        return
    console.print_json(json.dumps(record.to_dict(), default=str))
    for event in events:
        console.print(describe_event(ProgressEvent.from_dict(event)), highlight=False)


@runs.command("watch")
def watch(
    run_id: str = typer.Argument(..., help="The run id."),
    poll: float = typer.Option(0.5, min=0.05, help="Seconds between looks at the store."),
    as_json: bool = typer.Option(
        False, "--json", help="One JSON line per event, then one with the run's final record."
    ),
) -> None:
    """Print a run's events as they come, until it ends."""
    store, _ = _record(run_id)
    after = 0
    while True:
        record = store.get_run(run_id)  # before the events: none written before it ended is missed
        for event_id, event in store.events(run_id, after_id=after):
            after = event_id
            if as_json:
                print_json({"event_id": event_id, "event": event})
            else:
                console.print(describe_event(ProgressEvent.from_dict(event)), highlight=False)
        if record is not None and record.status in TERMINAL_STATUSES:
            if as_json:
                print_json({"run": record.to_dict()})
            else:
                console.print(f"[bold]{record.status}[/]")
            return
        time.sleep(poll)


@runs.command("prune")
def prune(
    older_than: str | None = typer.Option(
        None,
        "--older-than",
        help="Delete the workflows that ended longer ago than this (30d, 12h, 90m, seconds). "
        "Default: AGENTLOOP_RUN_RETENTION.",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only print what would be deleted."),
    as_json: bool = json_option(),
) -> None:
    """Delete ended workflows and all recorded of them; never an open run."""
    settings = cli_settings()
    age: Any = older_than if older_than is not None else settings.store.retention_seconds
    if age is None:
        raise fail("give --older-than (e.g. 30d), or set AGENTLOOP_RUN_RETENTION", code=EXIT_USAGE)
    try:
        before = datetime.now(UTC) - timedelta(seconds=age_seconds(age, "--older-than"))
    except ValueError as error:
        raise fail(str(error), code=EXIT_USAGE) from None
    pruned = prune_runs(run_store(settings), before=before, dry_run=dry_run)
    if as_json:
        print_json({"before": before.isoformat(), **pruned.to_dict()})
        return
    verb = "Would delete" if dry_run else "Deleted"
    console.print(
        f"{verb} {pruned.workflows} workflows that ended before {before:%Y-%m-%d %H:%M:%S} UTC: "
        f"{pruned.runs} runs, {pruned.events} events, {pruned.checkpoints} checkpoints, "
        f"{pruned.waits} questions, {pruned.recordings} recorded entries, "
        f"{pruned.slots} concurrency slot rows.",
        highlight=False,
    )
    if pruned.first_ids:
        shown = len(pruned.first_ids)
        more = f" (the oldest {shown} of {pruned.workflows})" if shown < pruned.workflows else ""
        console.print(f"Root run ids{more}:", highlight=False)
        for run_id in pruned.first_ids:
            console.print(f"  {run_id}", highlight=False, soft_wrap=True)


@runs.command("export")
def export(
    run_id: str = typer.Argument(..., help="The id of a recorded run (launched with --record)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="The file to write (default: stdout)."),
) -> None:
    """A recorded run as one JSON file: its runnable, input, output and recording."""
    store, _ = _record(run_id)
    try:
        recording = RunRecording.from_store(store, run_id)
    except ValueError as error:
        raise fail(str(error)) from None
    if output is None:
        print_json(recording.to_dict())
        return
    try:
        recording.save(output)
    except OSError as error:
        raise fail(f"cannot write {output}: {error}") from None
    errors.print(
        f"run {run_id}: {len(recording.entries)} recorded entries written to {output}", highlight=False
    )


@runs.command("import")
def import_run(
    file: Path = typer.Argument(..., help="A file `agentloop runs export` wrote."),
    as_json: bool = json_option(),
) -> None:
    """Keep a recording file in the run store, under its run id (for `agentloop replay RUN_ID`)."""
    recording = load_recording(file)
    try:
        recording.to_store(run_store(cli_settings()))
    except ValueError as error:
        raise fail(str(error)) from None
    if as_json:
        print_json({"run_id": recording.run_id, "entries": len(recording.entries)})
        return
    console.print(f"imported run [bold]{recording.run_id}[/] ({len(recording.entries)} recorded entries)")


def load_recording(file: Path) -> RunRecording:
    """The recording in ``file``, or a clear usage error."""
    try:
        return RunRecording.load(file)
    except OSError as error:
        raise fail(f"cannot read {file}: {error.strerror or error}") from None
    except ValueError as error:
        raise fail(f"{file}: {error}") from None

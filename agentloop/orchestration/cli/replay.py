"""``agentloop replay RUN_ID|FILE``: run a recorded run again, here, against its recording.

The runnable (from ``AGENTLOOP_IMPORTS``) runs in this process; its model turns are answered
from the recording, no connection leaves the machine (``orchestration/replay.py``). It prints
where the new code's requests first differ from the recorded ones and how the output differs,
and exits 1 on any difference (0 when the replay matches; 2 for bad input).

With ``--fork-at PATH:ITERATION`` it forks the run instead (``orchestration/forks/``): replayed up
to that place with no model call, then on live with the current code and the deployment's model,
as a new run kept in the run store whose record names its origin. It prints the new run; exit 0
when it succeeded, 4 when it degraded, 1 when it failed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

from agentloop.orchestration.cli.common import (
    EXIT_DEGRADED,
    EXIT_FAILED,
    cli_settings,
    console,
    deployment_registry,
    fail,
    json_option,
    print_json,
    run_store,
)
from agentloop.orchestration.cli.runs import load_recording
from agentloop.orchestration.errors import ContextSpecError, RunNotFoundError, UnknownRunnableError
from agentloop.orchestration.forks import ForkPoint, check_fork_point, fork
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.replay import RunRecording, replay
from agentloop.orchestration.store import RunStore


def replay_command(
    source: str = typer.Argument(..., help="A recorded run's id, or a file `agentloop runs export` wrote."),
    fork_at: str | None = typer.Option(
        None,
        "--fork-at",
        metavar="PATH:ITERATION",
        help="Fork instead: replay up to this recorded step and loop iteration, then go on live "
        "with the current code, as a new run (exit 0, 4 degraded, 1 failed).",
    ),
    as_json: bool = json_option(),
) -> None:
    """Run a recorded run again in this process, with no model calls and no network; report the
    first divergence of its model requests and the difference of its output (exit 1 on either).

    With --fork-at PATH:ITERATION, fork it instead: replayed up to that step, then live from it
    on with the current code, as a new run whose record names its origin."""
    settings = cli_settings()
    point = None
    if fork_at is not None:
        try:
            point = ForkPoint.parse(fork_at)
        except ValueError as error:
            raise fail(str(error)) from None
    if Path(source).is_file():
        recording = load_recording(Path(source))
    else:
        try:
            recording = RunRecording.from_store(run_store(settings), source)
        except RunNotFoundError:
            raise fail(f"{source!r} is neither a file nor a run in the run store") from None
        except ValueError as error:
            raise fail(str(error)) from None
    registry = deployment_registry(settings)
    if recording.runnable not in registry:
        raise fail(str(UnknownRunnableError(recording.runnable, registry.names)))
    if point is not None:
        _fork(recording, point, registry, run_store(settings), as_json=as_json)
        return
    try:
        report = asyncio.run(replay(recording, registry=registry))
    except ContextSpecError as error:  # the recorded spec, refused by the runnable's context factory
        raise fail(str(error)) from None
    if as_json:
        print_json(report.to_dict())
    else:
        console.print(report.describe(), highlight=False, markup=False, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)


def _fork(
    recording: RunRecording, point: ForkPoint, registry: RunnableRegistry, store: RunStore, *, as_json: bool
) -> None:
    """``--fork-at``: the new run, kept in the run store, printed; its exit code."""
    try:
        check_fork_point(recording, point)
    except ValueError as error:
        raise fail(str(error)) from None
    try:
        report = asyncio.run(fork(recording, at=point, registry=registry, store=store))
    except ContextSpecError as error:
        raise fail(str(error)) from None
    if as_json:
        print_json(report.to_dict())
    else:
        console.print(report.describe(), highlight=False, markup=False, soft_wrap=True)
    if report.status == "failed":
        raise typer.Exit(EXIT_FAILED)
    if report.status == "degraded":
        raise typer.Exit(EXIT_DEGRADED)

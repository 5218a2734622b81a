"""``agentloop replay RUN_ID|FILE``: run a recorded run again, here, against its recording.

The runnable (from ``AGENTLOOP_IMPORTS``) runs in this process; its model turns are answered
from the recording, no connection leaves the machine (``orchestration/replay.py``). It prints
where the new code's requests first differ from the recorded ones and how the output differs,
and exits 1 on any difference (0 when the replay matches; 2 for bad input).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

from agentloop.orchestration.cli.common import (
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
from agentloop.orchestration.replay import RunRecording, replay


def replay_command(
    source: str = typer.Argument(..., help="A recorded run's id, or a file `agentloop runs export` wrote."),
    as_json: bool = json_option(),
) -> None:
    """Run a recorded run again in this process, with no model calls and no network; report the
    first divergence of its model requests and the difference of its output (exit 1 on either)."""
    settings = cli_settings()
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

"""What the CLI tests share: a runner, an environment of embedded defaults, and runs written to the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from agentloop.orchestration.cli import app
from agentloop.orchestration.store import RunStore, open_store

runner = CliRunner()


def invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    """Run the CLI as a terminal 80 columns wide would."""
    return runner.invoke(app, list(args), env={"COLUMNS": "80", **(env or {})}, catch_exceptions=False)


def home_store(home: Path) -> RunStore:
    """The run store the CLI opens under ``home`` (``AGENTLOOP_HOME``)."""
    store, _ = open_store(f"sqlite:///{home / '.agentloop' / 'agentloop.sqlite3'}")
    return store


def add_run(
    store: RunStore, run_id: str, *, status: str | None = None, runnable: str = "parity.count"
) -> None:
    """A root run in ``store``: pending, or ended with ``status``."""
    store.create_run(run_id=run_id, runnable="parity.count", input=3)
    if status is not None:
        store.mark_running(run_id)
        store.finish_run(run_id, status=status, output=3 if status == "succeeded" else None)

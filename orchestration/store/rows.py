"""The rows the SQL run store writes: progress events with their indexed columns, and loop rows
(a loop's checkpoint or result), their keys checked before the database sees them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestration.store.checks import MAX_ITERATION, MAX_PATH_CHARS, check_text, event_payloads
from orchestration.store.tables import utcnow

__all__ = ["event_columns", "event_rows", "loop_row"]


def event_columns(event: Mapping[str, Any]) -> dict[str, Any]:
    """The indexed columns of a progress event: ``path``, ``status``, ``phase``, ``iteration``
    (a status cut to its column's 32 characters, an iteration past 32 bits left out)."""
    iteration = event.get("iteration")
    counted = type(iteration) is int and 0 <= iteration <= MAX_ITERATION
    return {
        "path": str(event.get("path") or ""),
        "status": str(event.get("status") or "")[:32],
        "phase": str(event.get("phase") or ""),
        "iteration": iteration if counted else None,
    }


def event_rows(root_run_id: str, events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ``run_events`` rows of ``events`` under the root run ``root_run_id`` (payloads checked)."""
    now = utcnow()
    return [
        {"run_id": root_run_id, "payload": payload, "created_at": now, **event_columns(payload)}
        for payload in event_payloads(root_run_id, events)
    ]


def loop_row(run_id: str, path: str, **values: Any) -> dict[str, Any]:
    """A row of the checkpoints table for the loop at ``path``, its keys checked."""
    run, loop = check_text(run_id, "run id"), check_text(path, "loop path", max_chars=MAX_PATH_CHARS)
    return {"run_id": run, "path": loop, **values, "updated_at": utcnow()}

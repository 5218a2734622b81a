"""What a caller is shown of a run and of its events: Flower's privacy rules, over HTTP.

Every caller that may reach a run (``service.py``: its principal's runs, or
any with ``admin``) sees its id, runnable, status, times, the principal that
started it, token usage (with its step-cache hits, misses and tokens saved), the run a fork
started from (``forked_from``: its id and the fork point, no content)
and where its events are (path, runnable, iteration, phase, status). Inputs, results, error
messages and event texts (``message``, ``data``) go only to holders of the
``read`` scope; the others see the size hint
:func:`~agentloop.orchestration.redaction.describe_hidden` gives (``<hidden dict 123
chars>``), as Flower shows a task's arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentloop.orchestration.redaction import describe_hidden
from agentloop.orchestration.store import CHILD_SUMS, RunRecord, RunStatus

__all__ = ["event_view", "pending_view", "run_view"]


def _time(value: Any) -> str | None:
    return None if value is None else value.isoformat()


def _content(value: Any, can_read: bool) -> Any:
    """An input or a result: itself for a reader, else its size hint (``null`` stays ``null``)."""
    return value if can_read or value is None else describe_hidden(value)


def _error(error: Any, can_read: bool) -> Any:
    if error is None or can_read:
        return error
    if isinstance(error, Mapping):
        return {"type": str(error.get("type", "")), "message": describe_hidden(error.get("message"))}
    return describe_hidden(error)


def run_view(record: RunRecord, *, can_read: bool) -> dict[str, Any]:
    """A run as JSON (field names of the wire contract), contents hidden unless ``can_read``."""
    return {
        "id": record.id,
        "runnable": record.runnable,
        "status": record.status,
        "finished": record.is_finished,
        "created_at": _time(record.created_at),
        "started_at": _time(record.started_at),
        "finished_at": _time(record.finished_at),
        "usage": {**record.usage(), "total_tokens": record.total_tokens},
        "token_budget": record.token_budget,
        "cancel_requested": record.cancel_requested,
        "principal": record.principal,
        "input": _content(record.input, can_read),
        "result": _content(record.output, can_read),
        "error": _error(record.error, can_read),
        "stopped_by": record.stopped_by,
        "forked_from": record.forked_from,
    }


def pending_view(
    run_id: str, runnable: str, principal: str | None = None, *, input: Any = None, can_read: bool = False
) -> dict[str, Any]:
    """A run launched from this server (by ``principal``) that no worker has recorded yet
    (``input``: the one it was launched with, when known; hidden unless ``can_read``)."""
    return {
        "id": run_id,
        "runnable": runnable,
        "status": RunStatus.PENDING.value,
        "finished": False,
        "created_at": None,
        "started_at": None,
        "finished_at": None,
        "usage": {**dict.fromkeys(CHILD_SUMS, 0), "total_tokens": 0},
        "token_budget": None,
        "cancel_requested": False,
        "principal": principal,
        "input": _content(input, can_read),
        "result": None,
        "error": None,
        "stopped_by": None,
        "forked_from": None,
    }


def event_view(event_id: int, event: Mapping[str, Any], *, can_read: bool) -> dict[str, Any]:
    """One progress event with its store id; ``message`` and ``data`` hidden unless ``can_read``."""
    message = event.get("message", "")
    data = event.get("data") or {}
    return {
        "id": event_id,
        "run_id": event.get("run_id"),
        "path": event.get("path", ""),
        "runnable": event.get("runnable", ""),
        "iteration": event.get("iteration", 0),
        "max_iterations": event.get("max_iterations", 0),
        "phase": event.get("phase", ""),
        "status": event.get("status", ""),
        "message": message if can_read or not message else describe_hidden(message),
        "data": data if can_read else ({} if not data else {"hidden": describe_hidden(data)}),
        "at": event.get("at"),
    }

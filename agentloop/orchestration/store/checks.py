"""What every run store checks before a database sees a value, and why a finish was refused.

The SQL stores and the memory twin share these checks, so all three accept
exactly the same values: no NUL character in a text (PostgreSQL stores none), no
text longer than its column, no count past a signed 64-bit integer. A value that
fails is a ``ValueError`` naming the field, never a database's ``DataError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentloop.orchestration.errors import RunAlreadyEndedError, RunNotFoundError, RunOwnershipError
from agentloop.orchestration.store.json_values import JsonValue, flat_json_copy, to_json_value
from agentloop.orchestration.store.protocol import TERMINAL_STATUSES, RunOwner, RunRecord
from agentloop.orchestration.store.tables import utcnow

#: Longest id, runnable name or Celery task id a run record holds (the columns' width).
MAX_ID_CHARS = 255
#: Longest path of a loop inside a workflow that a checkpoint holds.
MAX_PATH_CHARS = 1024
#: Largest count a run record holds (tokens, budgets: a signed 64-bit column).
MAX_COUNT = 2**63 - 1
#: Largest iteration number a checkpoint holds (a signed 32-bit column).
MAX_ITERATION = 2**31 - 1
#: Longest error message kept on a run; longer ones are cut, saying how much was cut.
MAX_ERROR_CHARS = 10_000


def check_text(value: object, what: str, *, max_chars: int = MAX_ID_CHARS) -> str:
    """``value`` when it is a string a text column holds (no NUL, at most ``max_chars``);
    ``ValueError`` naming ``what`` otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, not {type(value).__name__}")
    if "\x00" in value:
        raise ValueError(f"{what} must not contain a NUL character")
    if len(value) > max_chars:
        raise ValueError(f"{what} is {len(value)} characters long; at most {max_chars} are stored")
    return value


def check_terminal_status(status: str) -> str:
    """``status`` as a plain string when it ends a run; ``ValueError`` naming the allowed ones otherwise."""
    if status not in TERMINAL_STATUSES:
        allowed = ", ".join(sorted(TERMINAL_STATUSES))
        raise ValueError(f"{status!r} does not end a run; use one of: {allowed}")
    return str(status)


def check_count(value: int, what: str, *, maximum: int = MAX_COUNT) -> int:
    """``value`` when it is an ``int`` (not a bool) from 0 to ``maximum``; ``ValueError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative int, not {value!r}")
    if value > maximum:
        raise ValueError(f"{what} must be at most {maximum}, not {value}")
    return value


def event_payloads(root_run_id: str, events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The progress events as the JSON objects to store; ``TypeError`` for one that is not a mapping."""
    payloads = []
    for event in events:
        if not isinstance(event, Mapping):
            raise TypeError(f"a progress event is a mapping, not {type(event).__name__}")
        flat = flat_json_copy(event)  # most events: no data, nothing to walk
        if flat is None:
            flat = to_json_value(dict(event), what=f"progress event of run {root_run_id!r}")
        payloads.append(flat)
    return payloads


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
    """The rows of ``run_events`` that store ``events`` under ``root_run_id``."""
    now = utcnow()
    return [
        {"run_id": root_run_id, "payload": payload, "created_at": now, **event_columns(payload)}
        for payload in event_payloads(root_run_id, events)
    ]


def error_value(error: JsonValue | BaseException) -> JsonValue:
    """An exception as ``{"type", "message"}``; any other value unchanged, but for its texts.

    A NUL character (no database column holds one) is written ``\\x00`` and a
    message is cut at :data:`MAX_ERROR_CHARS`, so recording an error never fails
    on the text of the value that caused it.
    """
    if isinstance(error, BaseException):
        error = {"type": type(error).__name__, "message": str(error)}
    return _storable_texts(error)


def _storable_texts(value: JsonValue, depth: int = 0) -> JsonValue:
    if isinstance(value, str):
        text = value.replace("\x00", "\\x00")
        if len(text) > MAX_ERROR_CHARS:
            text = f"{text[:MAX_ERROR_CHARS]}... [{len(text) - MAX_ERROR_CHARS} more chars cut]"
        return text
    if depth > 32:
        return value
    if isinstance(value, Mapping):
        return {_storable_texts(k, depth + 1): _storable_texts(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable_texts(item, depth + 1) for item in value]
    return value


def check_finish(
    record: RunRecord | None,
    owner: RunOwner | None,
    *,
    run_id: str,
    owner_token: str | None,
    outcome: tuple[str, JsonValue, JsonValue],
) -> None:
    """Why :meth:`RunStore.finish_run` did not end the run it was asked to end.

    Raises :class:`RunNotFoundError`, :class:`RunOwnershipError` or
    :class:`RunAlreadyEndedError`; returns when the run had already ended with
    this very ``(status, output, error)``, which a retried or redelivered
    finish may ask for again.
    """
    if record is None:
        raise RunNotFoundError(run_id)
    if owner is not None and not owner.holds(owner_token):
        raise RunOwnershipError(run_id)
    if record.is_finished and (record.status, record.output, record.error) == outcome:
        return
    raise RunAlreadyEndedError(record)


def is_storable_id(value: object) -> bool:
    """Whether ``value`` could be the id of a stored run (a run with any other id cannot exist)."""
    return isinstance(value, str) and "\x00" not in value and len(value) <= MAX_ID_CHARS


def run_key(run_id: object) -> str:
    """``run_id`` as a message names it: its ``repr``, cut short when long."""
    shown = repr(run_id)
    return shown if len(shown) <= 80 else f"{shown[:77]}..."


def new_run_values(
    *,
    run_id: str,
    runnable: str,
    input: JsonValue,
    root_run_id: str | None,
    parent_run_id: str | None,
    path: str,
    token_budget: int | None,
    celery_task_id: str | None,
    principal: str | None = None,
    forked_from: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The columns of a new pending run, every value checked (``ValueError`` naming the field)."""
    check_text(run_id, "run id")
    optional = {
        "root run id": root_run_id,
        "parent run id": parent_run_id,
        "Celery task id": celery_task_id,
        "principal": principal,
    }
    for what, value in optional.items():
        if value is not None:
            check_text(value, what)
    return {
        "id": run_id,
        "root_run_id": root_run_id or run_id,
        "parent_run_id": parent_run_id,
        "runnable": check_text(runnable, "runnable name"),
        "path": check_text(path, "run path", max_chars=MAX_PATH_CHARS),
        "status": "pending",
        "input": to_json_value(input, what=f"input of run {run_key(run_id)}"),
        "forked_from": _fork_origin(forked_from),
        "output": None,
        "error": None,
        "token_budget": None if token_budget is None else check_count(token_budget, "token_budget"),
        "celery_task_id": celery_task_id,
        "created_at": utcnow(),
        "started_at": None,
        "finished_at": None,
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_hits": 0,
        "cache_misses": 0,
        "tokens_saved": 0,
        "tool_calls": 0,
        "cancel_requested": False,
        "principal": principal,
    }


def loop_row(
    run_id: str, path: str, *, checkpoint: tuple[int, JsonValue] | None = None, result: JsonValue = None
) -> dict[str, Any]:
    """A checked ``checkpoints`` row: a loop's ``checkpoint`` (iteration, state), or, without one,
    its end with ``result``."""
    where = f"loop {path!r} in run {run_id!r}"
    row: dict[str, Any] = {
        "run_id": check_text(run_id, "run id"),
        "path": check_text(path, "loop path", max_chars=MAX_PATH_CHARS),
        "iteration": None,
        "state": None,
        "finished": checkpoint is None,
        "result": None,
        "updated_at": utcnow(),
    }
    if checkpoint is None:
        row["result"] = to_json_value(result, what=f"result of {where}")
    else:
        row["iteration"] = check_count(checkpoint[0], "iteration", maximum=MAX_ITERATION)
        row["state"] = to_json_value(checkpoint[1], what=f"checkpoint state of {where}")
    return row


def _fork_origin(forked_from: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A forked run's origin, checked: ``{"run_id", "path", "iteration"}`` (``None``: not a fork)."""
    if forked_from is None:
        return None
    if not isinstance(forked_from, Mapping) or set(forked_from) != {"run_id", "path", "iteration"}:
        raise ValueError('forked_from must be {"run_id", "path", "iteration"}')
    return {
        "run_id": check_text(forked_from["run_id"], "forked_from run id"),
        "path": check_text(forked_from["path"], "forked_from path", max_chars=MAX_PATH_CHARS),
        "iteration": check_count(forked_from["iteration"], "forked_from iteration"),
    }

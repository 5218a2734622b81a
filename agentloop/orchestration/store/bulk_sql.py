"""The statements of :class:`~agentloop.orchestration.store.sql.SqlRunStore`'s bulk steps
(``store/bulk.py``): a packed batch's runs, many at a time."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from typing import cast as typed

from sqlalchemy import (
    BigInteger,
    Boolean,
    Executable,
    Integer,
    String,
    TextualSelect,
    bindparam,
    column,
    or_,
    text,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.dml import Insert, ReturningUpdate
from sqlalchemy.sql.elements import BindParameter

from agentloop.orchestration.store.base import Finish
from agentloop.orchestration.store.dialects import _lock_key, upserts
from agentloop.orchestration.store.protocol import TERMINAL_STATUSES
from agentloop.orchestration.store.tables import UtcDateTime, checkpoints, runs

#: The terminal statuses, as SQL text (the statements below are text).
_TERMINAL = ", ".join(f"'{status}'" for status in sorted(TERMINAL_STATUSES))

#: How many ids one ``IN`` list of a bulk step holds.
CHUNK = 500


def id_chunks(ids: Sequence[str]) -> Iterator[list[str]]:
    """``ids`` in lists of at most :data:`CHUNK` (each an ``expanding`` ``ids`` parameter)."""
    for start in range(0, len(ids), CHUNK):
        yield list(ids[start : start + CHUNK])


#: The ids of a bulk step, one list (:func:`id_chunks`): ``column.in_(IDS)``, compiled once.
IDS: BindParameter[str] = bindparam("ids", expanding=True)


@dataclass(frozen=True)
class BulkUpserts:
    """The loop upserts of :func:`~agentloop.orchestration.store.dialects.upserts`, each returning
    its row's run id too, for the loops of several runs in one statement."""

    start_runs_loops: Executable
    finish_runs_loops: Executable


@functools.cache
def bulk_upserts(dialect: str) -> BulkUpserts:
    """The dialect's :class:`BulkUpserts`, built once."""
    built = upserts(dialect)
    started, finished = typed(Insert, built.start_loops), typed(Insert, built.finish_loop)
    return BulkUpserts(
        start_runs_loops=started.returning(checkpoints.c.run_id),
        # the result that stands (what ``finish_loop`` returns), with its run and path
        finish_runs_loops=finished.returning(checkpoints.c.run_id, checkpoints.c.path),
    )


_PG_LOCK_RUNS = (
    "SELECT count(pg_advisory_xact_lock(key)) AS locked "
    "FROM (SELECT DISTINCT key FROM unnest(:lock_keys) AS key ORDER BY key) AS sorted"
)

PG_FINISH_RUNS_LOOPS: TextualSelect = (
    text(
        f"""WITH event_lock AS ({_PG_LOCK_RUNS}),
new_events AS (
    INSERT INTO run_events (run_id, payload, created_at, path, status, phase, iteration)
    SELECT e.value ->> 'run_id', e.value -> 'payload', :created_at, e.value ->> 'path',
           e.value ->> 'status', e.value ->> 'phase', CAST(e.value ->> 'iteration' AS INTEGER)
    FROM (
        SELECT batch.value, batch.ordinal
        FROM event_lock, jsonb_array_elements(:events) WITH ORDINALITY AS batch(value, ordinal)
        ORDER BY batch.ordinal
    ) AS e
),
used AS (
    UPDATE runs SET input_tokens = runs.input_tokens + used.input_tokens,
                    output_tokens = runs.output_tokens + used.output_tokens
    FROM jsonb_to_recordset(:usage) AS used(id text, input_tokens bigint, output_tokens bigint)
    WHERE runs.id = used.id
)
INSERT INTO checkpoints (run_id, path, iteration, state, finished, result, updated_at)
SELECT loop.value ->> 'run_id', loop.value ->> 'path', NULL, NULL, true,
       NULLIF(loop.value -> 'result', 'null'::jsonb), :updated_at
FROM jsonb_array_elements(:loops) AS loop(value)
ON CONFLICT (run_id, path) DO UPDATE
SET finished = true,
    result = CASE WHEN checkpoints.finished THEN checkpoints.result ELSE EXCLUDED.result END,
    updated_at = CASE WHEN checkpoints.finished THEN checkpoints.updated_at ELSE EXCLUDED.updated_at END
RETURNING checkpoints.run_id, checkpoints.path, checkpoints.result"""
    )
    .bindparams(
        bindparam("lock_keys", type_=postgresql.ARRAY(BigInteger())),
        bindparam("created_at", type_=UtcDateTime()),
        bindparam("events", type_=postgresql.JSONB()),
        bindparam("usage", type_=postgresql.JSONB()),
        bindparam("loops", type_=postgresql.JSONB()),
        bindparam("updated_at", type_=UtcDateTime()),
    )
    .columns(
        column("run_id", String()),
        column("path", String()),
        column("result", postgresql.JSONB(none_as_null=True)),
    )
)
"""Loops' results of several runs (``loops``: ``[{"run_id", "path", "result"}, ...]``, each loop
once; a first result stands), their events (``events``: ``[{"run_id", "payload", "path", "status",
"phase", "iteration"}, ...]``, in order, under each run's event lock, taken in one order) and their
usage (``usage``: ``[{"id", "input_tokens", "output_tokens"}, ...]``), as one statement whose text
never changes (compiled and prepared once, where a multi-row ``VALUES`` is a new text per pack)."""

PG_START_RUNS_LOOPS: TextualSelect = (
    text(
        """INSERT INTO checkpoints (run_id, path, finished, updated_at, deliveries)
SELECT loop.value ->> 'run_id', loop.value ->> 'path', false, :updated_at, 1
FROM jsonb_array_elements(:loops) AS loop(value)
ON CONFLICT (run_id, path) DO UPDATE SET deliveries = checkpoints.deliveries + 1
RETURNING checkpoints.run_id, checkpoints.path, checkpoints.finished, checkpoints.result,
          checkpoints.iteration, checkpoints.state, checkpoints.deliveries"""
    )
    .bindparams(bindparam("loops", type_=postgresql.JSONB()), bindparam("updated_at", type_=UtcDateTime()))
    .columns(
        column("run_id", String()),
        column("path", String()),
        column("finished", Boolean()),
        column("result", postgresql.JSONB(none_as_null=True)),
        column("iteration", Integer()),
        column("state", postgresql.JSONB(none_as_null=True)),
        column("deliveries", Integer()),
    )
)
"""``start_loops`` for loops of several runs (``loops``: ``[{"run_id", "path"}, ...]``, each once)."""

PG_FINISH_RUNS: TextualSelect = (
    text(
        f"""UPDATE runs
SET status = asked.status, output = NULLIF(asked.output, 'null'::jsonb),
    error = NULLIF(asked.error, 'null'::jsonb), finished_at = asked.finished_at, stopped_by = asked.stopped_by
FROM jsonb_to_recordset(:asked) AS asked(
    id text, status text, output jsonb, error jsonb, finished_at timestamptz, stopped_by text,
    owner_token text
)
WHERE runs.id = asked.id
  AND runs.status NOT IN ({_TERMINAL})
  AND (runs.owner_token IS NULL OR runs.owner_token = coalesce(asked.owner_token, ''))
RETURNING runs.id, runs.runnable, runs.started_at, runs.created_at"""
    )
    .bindparams(bindparam("asked", type_=postgresql.JSONB()))
    .columns(
        column("id", String()),
        column("runnable", String()),
        column("started_at", UtcDateTime()),
        column("created_at", UtcDateTime()),
    )
)
""":data:`FINISH_ONE_RUN` for several runs (``asked``: :func:`pg_finish_runs`), one statement."""


@functools.cache
def pg_insert_runs(columns: tuple[str, ...]) -> TextualSelect:
    """Insert runs unless their id exists, each given by the ``columns`` named (the others take
    their defaults; ``rows``: :func:`pg_run_rows`), one statement; returns each run inserted."""
    named = ", ".join(columns)
    return (
        text(
            f"""INSERT INTO runs ({named})
SELECT {named} FROM jsonb_populate_recordset(NULL::runs, :rows)
ON CONFLICT (id) DO NOTHING
RETURNING runs.id"""
        )
        .bindparams(bindparam("rows", type_=postgresql.JSONB()))
        .columns(column("id", String()))
    )


def pg_run_rows(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """:func:`pg_insert_runs`'s parameters: each row's checked columns, its times as ISO text."""
    return {
        "rows": [
            {name: value.isoformat() if isinstance(value, datetime) else value for name, value in row.items()}
            for row in rows
        ]
    }


PG_MARK_RUNS_RUNNING: TextualSelect = (
    text(
        f"""UPDATE runs SET status = 'running', started_at = coalesce(before.started_at, :now)
FROM (
    SELECT id, started_at FROM runs WHERE id = ANY(:ids) AND status NOT IN ({_TERMINAL}) FOR UPDATE
) AS before
WHERE runs.id = before.id
RETURNING runs.id, runs.runnable, before.started_at IS NULL AS first_start"""
    )
    .bindparams(bindparam("ids", type_=postgresql.ARRAY(String())), bindparam("now", type_=UtcDateTime()))
    .columns(column("id", String()), column("runnable", String()), column("first_start", Boolean()))
)
"""Mark the runs ``ids`` that have not ended running, keeping a first start time; returns each run
marked, and whether this was its first start."""


def pg_finish_runs(asked: Sequence[Finish]) -> dict[str, Any]:
    """:data:`PG_FINISH_RUNS`'s parameters."""
    return {
        "asked": [
            {
                "id": one.run_id,
                "status": one.outcome[0],
                "output": one.outcome[1],
                "error": one.outcome[2],
                "finished_at": one.ended.isoformat(),
                "stopped_by": one.stopped_by,
                "owner_token": one.owner_token,
            }
            for one in asked
        ]
    }


def pg_lock_keys(run_ids: Sequence[str]) -> list[int]:
    """The event-lock keys of ``run_ids`` (``dialects.PG_APPEND_EVENTS``'s, one per run)."""
    return [_lock_key(run_id) for run_id in run_ids]


_ENDED = (runs.c.id, runs.c.runnable, runs.c.started_at, runs.c.created_at)

#: One run ended as asked, where it has not ended and its owner's token (if it has one) is the one
#: asked with (SQLite: a run at a time, in the transaction; its text compiled once).
FINISH_ONE_RUN: ReturningUpdate[Any] = (
    update(runs)
    .where(
        runs.c.id == bindparam("asked_id"),
        runs.c.status.not_in(sorted(TERMINAL_STATUSES)),
        or_(runs.c.owner_token.is_(None), runs.c.owner_token == bindparam("asked_token")),
    )
    .values(
        status=bindparam("asked_status"),
        output=bindparam("asked_output", type_=runs.c.output.type),
        error=bindparam("asked_error", type_=runs.c.error.type),
        finished_at=bindparam("asked_at", type_=UtcDateTime()),
        stopped_by=bindparam("asked_stop"),
    )
    .returning(*_ENDED)
)


def finish_one_run(asked: Finish) -> dict[str, Any]:
    """:data:`FINISH_ONE_RUN`'s parameters for ``asked``."""
    status, output, error = asked.outcome
    return {
        "asked_id": asked.run_id,
        "asked_token": asked.owner_token or "",
        "asked_status": status,
        "asked_output": output,
        "asked_error": error,
        "asked_at": asked.ended,
        "asked_stop": asked.stopped_by,
    }

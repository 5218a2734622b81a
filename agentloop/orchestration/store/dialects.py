"""The two SQL databases the stores run on, and the statements that differ between them.

Only SQLite and PostgreSQL are supported: both offer ``INSERT ... ON CONFLICT``
and ``RETURNING``, which keep every write a single atomic statement. The
``INSERT`` that carries ``on_conflict_do_*`` comes from each dialect's own
module; :func:`insert` picks it, and :func:`upserts` builds the run store's once
per dialect. Locks: :func:`advisory_lock` for one transaction,
:func:`held_lock` around a block of work that uses other connections.
:func:`one_statement` is the connection for a call that is one statement.
:func:`insert_events_failing_once` records each level's failure once.

On PostgreSQL a batch of progress events is written by one statement
(:data:`PG_APPEND_EVENTS`, and :data:`PG_FINISH_LOOP` with a loop's result,
:data:`PG_FINISH_LOOP_THEN_START` with the next stage's start as well): it
takes the root run's advisory lock, so event ids commit in order and a reader
polling with ``after_id`` never skips one, inserts the batch in its order, and
commits, in one round trip, where a transaction of the same statements takes
five and holds the lock, which every branch of a wide composite shares, for all
of them.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Connection,
    Engine,
    Executable,
    Integer,
    Select,
    String,
    Table,
    TextClause,
    TextualSelect,
    bindparam,
    case,
    column,
    exists,
    func,
    literal,
    select,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite

from agentloop.orchestration.store.tables import UtcDateTime, checkpoints, run_events, runs, utcnow

SUPPORTED_DIALECTS = ("postgresql", "sqlite")


def dialect_of(engine: Engine) -> str:
    """``"sqlite"`` or ``"postgresql"``; ``ValueError`` for any other database."""
    dialect = engine.dialect.name
    if dialect not in SUPPORTED_DIALECTS:
        raise ValueError(
            f"the store supports {' and '.join(SUPPORTED_DIALECTS)}, not {dialect!r}; "
            "set DATABASE_URL to a postgresql:// or sqlite:/// URL"
        )
    return dialect


def one_statement(engine: Engine) -> Connection:
    """A connection of ``engine`` for one statement: a read, or a write that is atomic by itself
    (writes open ``connection.begin()`` on it). On PostgreSQL it runs in autocommit, one round
    trip instead of three (no ``BEGIN`` before it, no ``COMMIT`` or ``ROLLBACK`` after it).
    SQLite's connections are left as they are (an in-memory database shares one between threads).
    """
    connection = engine.connect()
    if engine.dialect.name != "postgresql":
        return connection
    try:
        return connection.execution_options(isolation_level="AUTOCOMMIT")
    except Exception:  # a pooled connection an outage left mid-transaction: never reuse it
        connection.invalidate()
        connection.close()
        raise


def insert(table: Table, dialect: str) -> postgresql.Insert | sqlite.Insert:
    """``INSERT`` into ``table`` with ``on_conflict_do_nothing`` / ``on_conflict_do_update``."""
    if dialect == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


def _lock_key(key: str) -> int:
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def advisory_lock(key: str) -> Select[tuple[object]]:
    """A PostgreSQL lock on ``key`` held until the transaction ends (SQLite locks the whole file)."""
    return select(func.pg_advisory_xact_lock(_lock_key(key)))


@contextmanager
def held_lock(engine: Engine, key: str) -> Iterator[None]:
    """Hold a lock on ``key`` for the ``with`` block, across every process using ``engine``'s database.

    On PostgreSQL a session advisory lock, taken and released on a connection
    of its own, so the block's work may use any connection. SQLite has no such
    lock: the block runs unguarded there, and its work must tolerate a
    concurrent twin (each of its writes is one transaction on a file lock).
    """
    if dialect_of(engine) != "postgresql":
        yield
        return
    with engine.connect() as connection:
        connection.execute(select(func.pg_advisory_lock(_lock_key(key))))
        connection.commit()
        try:
            yield
        finally:
            connection.execute(select(func.pg_advisory_unlock(_lock_key(key))))
            connection.commit()


@dataclass(frozen=True)
class Upserts:
    """The run store's upserts for one dialect, built once: they are on the hot path of every task."""

    create_run: Executable
    #: Count one more delivery of each loop (a row each: ``run_id``, ``path``, ``deliveries`` 1)
    #: and return its record (``RunStore.start_loops``).
    start_loops: Executable
    save_checkpoint: Executable
    finish_loop: Executable
    #: ``finish_loop`` returning the path too, for several loops in one statement.
    finish_loops: Executable


@functools.cache
def upserts(dialect: str) -> Upserts:
    """Insert a run unless its id exists (``RETURNING`` tells which); replace a loop's checkpoint
    unless it finished; record a loop's result unless it has one (``RETURNING`` the one that stands)."""
    run = insert(runs, dialect).on_conflict_do_nothing(index_elements=["id"]).returning(runs.c.id)
    saved = insert(checkpoints, dialect)
    saved = saved.on_conflict_do_update(
        index_elements=["run_id", "path"],
        set_={
            "iteration": saved.excluded.iteration,
            "state": saved.excluded.state,
            "updated_at": saved.excluded.updated_at,
            "deliveries": 0,  # progress: the deliveries that made none are counted from here
        },
        where=checkpoints.c.finished.is_(False),  # a finished loop's record stays as it ended
    )
    result = insert(checkpoints, dialect)
    before = checkpoints.c.finished.is_(True)  # a twin's result stands
    finished = result.on_conflict_do_update(
        index_elements=["run_id", "path"],
        set_={
            "finished": True,
            "result": case((before, checkpoints.c.result), else_=result.excluded.result),
            "updated_at": case((before, checkpoints.c.updated_at), else_=result.excluded.updated_at),
        },
    )
    started = insert(checkpoints, dialect)
    started = started.on_conflict_do_update(
        index_elements=["run_id", "path"], set_={"deliveries": checkpoints.c.deliveries + 1}
    )
    return Upserts(
        create_run=run,
        start_loops=started.returning(
            checkpoints.c.path,
            checkpoints.c.finished,
            checkpoints.c.result,
            checkpoints.c.iteration,
            checkpoints.c.state,
            checkpoints.c.deliveries,
        ),
        save_checkpoint=saved,
        finish_loop=finished.returning(checkpoints.c.result),
        finish_loops=finished.returning(checkpoints.c.path, checkpoints.c.result),
    )


_EVENT_LOCK = "event_lock AS (SELECT pg_advisory_xact_lock(:lock_key) AS locked)"
_EVENT_INSERT = """INSERT INTO run_events (run_id, payload, created_at, path, status, phase, iteration)
SELECT :root_run_id, e.value -> 'payload', :created_at, e.value ->> 'path', e.value ->> 'status',
       e.value ->> 'phase', CAST(e.value ->> 'iteration' AS INTEGER)
FROM (
    SELECT batch.value, batch.ordinal
    FROM event_lock, jsonb_array_elements(:events) WITH ORDINALITY AS batch(value, ordinal)
    ORDER BY batch.ordinal
) AS e"""
_EVENT_PARAMS = (
    bindparam("lock_key", type_=BigInteger()),
    bindparam("root_run_id", type_=String()),
    bindparam("created_at", type_=UtcDateTime()),
    bindparam("events", type_=postgresql.JSONB()),
)

PG_APPEND_EVENTS: TextClause = text(f"WITH {_EVENT_LOCK} {_EVENT_INSERT}").bindparams(*_EVENT_PARAMS)
"""Append a batch of events under a root run (params: :func:`pg_event_batch`)."""

_PG_USAGE = """used AS (
    UPDATE runs SET input_tokens = runs.input_tokens + :input_tokens,
                    output_tokens = runs.output_tokens + :output_tokens
    WHERE runs.id = :run_id AND :input_tokens + :output_tokens > 0
)"""
_PG_FIRST_RESULT_STANDS = """ON CONFLICT (run_id, path) DO UPDATE
SET finished = true,
    result = CASE WHEN checkpoints.finished THEN checkpoints.result ELSE EXCLUDED.result END,
    updated_at = CASE WHEN checkpoints.finished THEN checkpoints.updated_at ELSE EXCLUDED.updated_at END"""

PG_FINISH_LOOP: TextualSelect = (
    text(
        f"""WITH {_EVENT_LOCK}, new_events AS ({_EVENT_INSERT}), {_PG_USAGE}
INSERT INTO checkpoints (run_id, path, iteration, state, finished, result, updated_at)
VALUES (:run_id, :path, NULL, NULL, true, :result, :updated_at)
{_PG_FIRST_RESULT_STANDS}
RETURNING checkpoints.result"""
    )
    .bindparams(
        *_EVENT_PARAMS,
        bindparam("run_id", type_=String()),
        bindparam("path", type_=String()),
        bindparam("result", type_=postgresql.JSONB(none_as_null=True)),
        bindparam("updated_at", type_=UtcDateTime()),
        bindparam("input_tokens", type_=BigInteger()),
        bindparam("output_tokens", type_=BigInteger()),
    )
    .columns(column("result", postgresql.JSONB(none_as_null=True)))
)
"""A loop's result (its checkpoint kept; a result recorded before stands, and is the one
returned), a batch of events under its root run and the task's token usage, as one statement
(params: the finished row, :func:`pg_event_batch` and the two token counts)."""


PG_FINISH_LOOP_THEN_START: TextualSelect = (
    text(
        f"""WITH {_EVENT_LOCK}, new_events AS ({_EVENT_INSERT}), {_PG_USAGE},
finished AS (
    INSERT INTO checkpoints (run_id, path, iteration, state, finished, result, updated_at)
    VALUES (:run_id, :path, NULL, NULL, true, :result, :updated_at)
    {_PG_FIRST_RESULT_STANDS}
    RETURNING checkpoints.result
),
started AS (
    INSERT INTO checkpoints (run_id, path, finished, updated_at, deliveries)
    VALUES (:run_id, :next_path, false, :updated_at, 1)
    ON CONFLICT (run_id, path) DO UPDATE SET deliveries = checkpoints.deliveries + 1
    RETURNING checkpoints.finished, checkpoints.result, checkpoints.iteration, checkpoints.state,
              checkpoints.deliveries
)
SELECT finished.result, started.finished AS next_finished, started.result AS next_result,
       started.iteration AS next_iteration, started.state AS next_state,
       started.deliveries AS next_deliveries
FROM finished, started"""
    )
    .bindparams(
        *_EVENT_PARAMS,
        bindparam("run_id", type_=String()),
        bindparam("path", type_=String()),
        bindparam("next_path", type_=String()),
        bindparam("result", type_=postgresql.JSONB(none_as_null=True)),
        bindparam("updated_at", type_=UtcDateTime()),
        bindparam("input_tokens", type_=BigInteger()),
        bindparam("output_tokens", type_=BigInteger()),
    )
    .columns(
        column("result", postgresql.JSONB(none_as_null=True)),
        column("next_finished", Boolean()),
        column("next_result", postgresql.JSONB(none_as_null=True)),
        column("next_iteration", Integer()),
        column("next_state", postgresql.JSONB(none_as_null=True)),
        column("next_deliveries", Integer()),
    )
)
""":data:`PG_FINISH_LOOP`, and the start of the loop at ``next_path`` (one more delivery counted,
its record returned: ``next_*``), as one statement: a pipeline's stage ends and the next one in
the same task starts in one round trip (``RunStore.finish_loop_then_start``), where a
transaction of the two statements takes four (``BEGIN``, the two, ``COMMIT``)."""


PG_FINISH_LOOPS: TextualSelect = (
    text(
        f"""WITH {_EVENT_LOCK}, new_events AS ({_EVENT_INSERT}), {_PG_USAGE}
INSERT INTO checkpoints (run_id, path, iteration, state, finished, result, updated_at)
SELECT :run_id, loop.value ->> 'path', NULL, NULL, true, NULLIF(loop.value -> 'result', 'null'::jsonb),
       :updated_at
FROM jsonb_array_elements(:loops) AS loop(value)
{_PG_FIRST_RESULT_STANDS}
RETURNING checkpoints.path, checkpoints.result"""
    )
    .bindparams(
        *_EVENT_PARAMS,
        bindparam("run_id", type_=String()),
        bindparam("loops", type_=postgresql.JSONB()),
        bindparam("updated_at", type_=UtcDateTime()),
        bindparam("input_tokens", type_=BigInteger()),
        bindparam("output_tokens", type_=BigInteger()),
    )
    .columns(column("path", String()), column("result", postgresql.JSONB(none_as_null=True)))
)
"""Several loops' results (``loops``: ``[{"path", "result"}, ...]``, each path once), a batch of
events under their root run and the pack's token usage, as one statement: one round trip, and
one short statement text, where a multi-row ``VALUES`` is a statement as long as the pack."""

PG_SAVE_CHECKPOINTS: TextClause = text(
    f"""WITH {_EVENT_LOCK}, new_events AS ({_EVENT_INSERT}), {_PG_USAGE}
INSERT INTO checkpoints (run_id, path, iteration, state, finished, result, updated_at)
SELECT :run_id, saved.value ->> 'path', CAST(saved.value ->> 'iteration' AS INTEGER),
       NULLIF(saved.value -> 'state', 'null'::jsonb), false, NULL, :updated_at
FROM jsonb_array_elements(:checkpoints) AS saved(value)
ON CONFLICT (run_id, path) DO UPDATE
SET iteration = EXCLUDED.iteration, state = EXCLUDED.state, updated_at = EXCLUDED.updated_at,
    deliveries = 0
WHERE checkpoints.finished IS false"""
).bindparams(
    *_EVENT_PARAMS,
    bindparam("run_id", type_=String()),
    bindparam("checkpoints", type_=postgresql.JSONB()),
    bindparam("updated_at", type_=UtcDateTime()),
    bindparam("input_tokens", type_=BigInteger()),
    bindparam("output_tokens", type_=BigInteger()),
)
"""Several loops' checkpoints (``checkpoints``: ``[{"path", "iteration", "state"}, ...]``, each
path once), the events emitted before them (:func:`pg_event_batch`) and the usage of the model
calls before them (the two token counts), in one statement; a finished loop's record stays as it
ended."""


def pg_event_batch(root_run_id: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The parameters of :data:`PG_APPEND_EVENTS` for event ``rows`` (``checks.event_rows``)."""
    columns = ("payload", "path", "status", "phase", "iteration")
    return {
        "lock_key": _lock_key(root_run_id),
        "root_run_id": root_run_id,
        "created_at": rows[0]["created_at"] if rows else utcnow(),
        "events": [{name: row[name] for name in columns} for row in rows],
    }


def insert_events_failing_once(connection: Connection, root_run_id: str, rows: list[dict[str, Any]]) -> None:
    """Insert event ``rows`` in their order, in the caller's transaction, leaving out a ``failed``
    event for a path that has one already: two tasks of a run that fail at once both report the
    levels that enclose them, and each level fails once.

    On PostgreSQL the root run's event lock is taken first, by a statement of its own (a statement's
    snapshot predates a lock it takes itself), so each insert after it sees every failure committed
    before. On SQLite (WAL) an insert whose read went stale before it could write fails with
    "database is locked", and the store's retry runs it again.
    """
    if connection.dialect.name == "postgresql":
        connection.execute(select(func.pg_advisory_xact_lock(_lock_key(root_run_id))))
    for row in rows:
        if row["status"] != "failed":
            connection.execute(run_events.insert(), row)
            continue
        names = list(row)
        failed_before = exists().where(
            run_events.c.run_id == row["run_id"],
            run_events.c.path == row["path"],
            run_events.c.status == "failed",
        )
        values = select(*(literal(row[name], run_events.c[name].type) for name in names)).where(
            ~failed_before
        )
        connection.execute(run_events.insert().from_select(names, values))

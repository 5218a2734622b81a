"""The statements of :class:`~agentloop.orchestration.store.sql.SqlRunStore`'s bulk steps
(``store/bulk.py``): a packed batch's runs, many at a time."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from typing import cast as typed

from sqlalchemy import (
    BigInteger,
    Executable,
    String,
    TextClause,
    bindparam,
    cast,
    column,
    func,
    or_,
    text,
    update,
)
from sqlalchemy import values as values_of
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.dml import Insert, ReturningUpdate

from agentloop.orchestration.store.base import Finish
from agentloop.orchestration.store.dialects import _lock_key, upserts
from agentloop.orchestration.store.protocol import TERMINAL_STATUSES
from agentloop.orchestration.store.tables import UtcDateTime, checkpoints, runs

#: How many ids one ``IN`` list of a bulk step holds.
CHUNK = 500


def id_chunks(ids: Sequence[str]) -> Iterator[list[str]]:
    """``ids`` in lists of at most :data:`CHUNK`."""
    for start in range(0, len(ids), CHUNK):
        yield list(ids[start : start + CHUNK])


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


_PG_LOCK_RUNS: TextClause = text(
    "SELECT count(pg_advisory_xact_lock(key)) FROM "
    "(SELECT DISTINCT key FROM unnest(:keys) AS key ORDER BY key) AS sorted"
).bindparams(bindparam("keys", type_=postgresql.ARRAY(BigInteger())))


def lock_runs_events(run_ids: Sequence[str]) -> tuple[Executable, dict[str, Any]]:
    """PostgreSQL: the statement and parameters that take the event lock of each of ``run_ids``
    (``dialects.PG_APPEND_EVENTS``'s) for the transaction, in one order (no two writers wait on
    each other), so each run's event ids commit in order."""
    return _PG_LOCK_RUNS, {"keys": [_lock_key(run_id) for run_id in run_ids]}


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


def finish_runs_statement(asked: Sequence[Finish]) -> ReturningUpdate[Any]:
    """PostgreSQL: ``UPDATE runs ... FROM (VALUES ...)``, :data:`FINISH_ONE_RUN` for each of
    ``asked`` in one statement; returns each run ended."""
    asked_runs = values_of(
        column("id", String()),
        column("status", String()),
        column("output", runs.c.output.type),
        column("error", runs.c.error.type),
        column("finished_at", UtcDateTime()),
        column("stopped_by", String()),
        column("owner_token", String()),
        name="asked",
    ).data(
        [
            (
                one.run_id,
                one.outcome[0],
                one.outcome[1],
                one.outcome[2],
                one.ended,
                one.stopped_by,
                one.owner_token,
            )
            for one in asked
        ]
    )
    return (
        update(runs)
        .where(
            runs.c.id == asked_runs.c.id,
            runs.c.status.not_in(sorted(TERMINAL_STATUSES)),
            or_(
                runs.c.owner_token.is_(None),
                runs.c.owner_token == func.coalesce(asked_runs.c.owner_token, ""),
            ),
        )
        .values(
            status=asked_runs.c.status,
            # a column all NULL has no type in ``VALUES``: each is cast to its column's
            output=cast(asked_runs.c.output, runs.c.output.type),
            error=cast(asked_runs.c.error, runs.c.error.type),
            finished_at=cast(asked_runs.c.finished_at, UtcDateTime()),
            stopped_by=cast(asked_runs.c.stopped_by, String()),
        )
        .returning(*_ENDED)
    )

"""``SqlRunStore``: runs, progress events, usage, cancellation and checkpoints in SQL: the
primitives of :class:`~agentloop.orchestration.store.base.RunStoreBase`, which owns the public
methods, their checks and their metrics.

SQLAlchemy Core on plain connections, no ORM session. Every write is one
atomic statement (``INSERT ... ON CONFLICT``, ``UPDATE ... SET x = x + :n ...
RETURNING``) or a few in one short transaction, so several worker processes
can share the database: on SQLite the writes serialise on the file lock (WAL
mode, busy timeout), on PostgreSQL on row locks. Every call is retried while
the database is unreachable (:class:`~agentloop.orchestration.store.retry.StoreRetry`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Row,
    RowMapping,
    Update,
    bindparam,
    func,
    literal,
    or_,
    select,
    update,
)

from agentloop.loops.run_outcome import MODEL_UNAVAILABLE, STOPPED_BY_BOUND
from agentloop.orchestration.errors import RunExistsError, RunNotFoundError
from agentloop.orchestration.store.base import (
    Ended,
    EventQuery,
    Finish,
    LoopEnds,
    Refused,
    Rows,
    RunQuery,
)
from agentloop.orchestration.store.bulk import BulkRunStoreBase, LoopEnd
from agentloop.orchestration.store.bulk_sql import (
    FINISH_ONE_RUN,
    IDS,
    PG_FINISH_RUNS,
    PG_FINISH_RUNS_LOOPS,
    PG_MARK_RUNS_RUNNING,
    PG_START_RUNS_LOOPS,
    bulk_upserts,
    finish_one_run,
    id_chunks,
    pg_finish_runs,
    pg_insert_runs,
    pg_lock_keys,
    pg_run_rows,
)
from agentloop.orchestration.store.checks import (
    event_rows,
    is_storable_id,
    loop_row,
)
from agentloop.orchestration.store.concurrency import SqlConcurrencySlots
from agentloop.orchestration.store.dialects import (
    PG_APPEND_EVENTS,
    PG_FINISH_LOOP,
    PG_FINISH_LOOP_THEN_START,
    PG_FINISH_LOOPS,
    PG_SAVE_CHECKPOINTS,
    dialect_of,
    insert,
    insert_events_failing_once,
    one_statement,
    pg_event_batch,
    upserts,
)
from agentloop.orchestration.store.direct import run_fixed
from agentloop.orchestration.store.json_values import JsonValue
from agentloop.orchestration.store.protocol import (
    CHILD_SUMS,
    TERMINAL_STATUSES,
    LoopRecord,
    RunOwner,
    RunRecord,
    RunStatus,
    StartedLoop,
)
from agentloop.orchestration.store.recordings import SqlRecordingStore
from agentloop.orchestration.store.retry import StoreRetry, retried
from agentloop.orchestration.store.tables import UtcDateTime, checkpoints, run_events, runs, utcnow
from agentloop.orchestration.store.unless_open import insert_unless_open

_RUN_FIELDS = tuple(field.name for field in fields(RunRecord))
_RUN_COLUMNS = tuple(runs.c[name] for name in _RUN_FIELDS)
_RUN = select(*_RUN_COLUMNS).where(runs.c.id == bindparam("run_id"))
_OWNER_AND_STATUS = select(runs.c.launch_digest, runs.c.owner_token, runs.c.status).where(
    runs.c.id == bindparam("run_id")
)
_LOOP_RECORD = select(
    checkpoints.c.finished, checkpoints.c.result, checkpoints.c.iteration, checkpoints.c.state
)
_ONE_LOOP_RECORD = _LOOP_RECORD.where(
    checkpoints.c.run_id == bindparam("run_id"), checkpoints.c.path == bindparam("path")
)


def _record_of_loop(row: Sequence[Any] | None) -> LoopRecord:
    """A loop's record from a :data:`_LOOP_RECORD` row (``None``: nothing recorded yet)."""
    if row is None:
        return LoopRecord(finished=False, result=None, checkpoint=None)
    finished, result, iteration, state = row[0], row[1], row[2], row[3]
    return LoopRecord(
        finished=bool(finished),
        result=result if finished else None,
        checkpoint=None if iteration is None else (iteration, state),
    )


def _started(row: Any) -> StartedLoop:
    """A loop's record, with its count of deliveries, from a ``start_loops`` row (SQLAlchemy's,
    or :func:`~agentloop.orchestration.store.direct.run_fixed`'s: both name their columns)."""
    record = _record_of_loop((row.finished, row.result, row.iteration, row.state))
    return StartedLoop(record, int(row.deliveries))


def _pg_loop_end(ends: LoopEnds) -> dict[str, Any]:
    """The parameters of ``PG_FINISH_LOOP`` for one loop's end: its row, its events, its usage."""
    (row,) = ends.loops
    return {**row, **pg_event_batch(ends.run_id, ends.events), **ends.tokens}


def _fails(rows: list[dict[str, Any]]) -> bool:
    """Whether event ``rows`` report a failure (each level fails once: ``_insert_events``)."""
    return any(row["status"] == "failed" for row in rows)


def _insert_events(connection: Connection, root_run_id: str, rows: list[dict[str, Any]]) -> None:
    """Insert event ``rows`` in the caller's transaction, a ``failed`` one only for a level that has
    none yet (``dialects.insert_events_failing_once``)."""
    if _fails(rows):
        insert_events_failing_once(connection, root_run_id, rows)
    elif rows:
        connection.execute(run_events.insert(), rows)


def _record(row: Sequence[Any]) -> RunRecord:
    """A run's record from a row of :data:`_RUN_COLUMNS`, in their order."""
    return RunRecord(**dict(zip(_RUN_FIELDS, row, strict=True)))


def _record_and_owner(columns: RowMapping) -> tuple[RunRecord, RunOwner | None]:
    values = dict(columns)
    digest, token = values.pop("launch_digest"), values.pop("owner_token")
    owner = None if token is None else RunOwner(launch_digest=digest or "", token=token)
    return RunRecord(**values), owner


class SqlRunStore(BulkRunStoreBase):
    """The :class:`~agentloop.orchestration.store.RunStore` on SQLite or PostgreSQL.

    Build it on an engine of a migrated database
    (:func:`~agentloop.orchestration.store.open_store` does both).
    """

    def __init__(self, engine: Engine, *, retry: StoreRetry | None = None) -> None:
        self.engine = engine
        """The engine the store uses (``dispose()`` it when done with the store)."""
        self.dialect = dialect_of(engine)
        """``"sqlite"`` or ``"postgresql"``."""
        self.retry = retry or StoreRetry()
        """How a call rides out an unreachable database (default: 60 s of retries)."""
        self._upserts = upserts(self.dialect)
        # a new run's record as stored, from the INSERT itself: a launch's claim in one statement
        self._insert_run_record = (
            insert(runs, self.dialect).on_conflict_do_nothing(index_elements=["id"]).returning(*_RUN_COLUMNS)
        )
        self.recordings = SqlRecordingStore(engine, dialect=self.dialect, retry=self.retry)
        """The entries of recorded runs (``run_recordings``), in the same database."""
        self.concurrency = SqlConcurrencySlots(engine, dialect=self.dialect, retry=self.retry)
        """The slots of concurrency keys (``concurrency_slots``), in the same database."""

    @retried
    def _insert_run(self, values: dict[str, Any], owner: RunOwner | None) -> RunRecord:
        owned = {"launch_digest": owner.launch_digest, "owner_token": owner.token} if owner else {}
        # One statement when the id is new (one round trip on PostgreSQL: dialects.one_statement);
        # when it exists, the run stored before is read on its own (it has committed: the INSERT
        # waited for it, and READ COMMITTED reads it in a transaction or not).
        with one_statement(self.engine) as connection, connection.begin():
            created = connection.execute(self._insert_run_record, {**values, **owned}).first()
            if created is None:
                stored = connection.execute(select(*_RUN_COLUMNS).where(runs.c.id == values["id"])).one()
        if created is None:
            raise RunExistsError(_record(stored))
        return _record(created)

    @retried
    def _insert_unless_open(self, values: dict[str, Any]) -> RunRecord:
        with self.engine.begin() as connection:
            return _record(insert_unless_open(connection, self.dialect, values))

    @retried
    def _run_owner_and_status(self, run_id: str) -> tuple[RunOwner | None, str]:
        found = run_fixed(self.engine, _OWNER_AND_STATUS, {"run_id": run_id})
        if not found:
            raise RunNotFoundError(run_id)
        digest, token, status = found[0]
        return None if token is None else RunOwner(launch_digest=digest or "", token=token), status

    @retried
    def _mark_running(self, run_id: str) -> tuple[bool, str | None]:
        open_run = (runs.c.id == run_id, runs.c.status.not_in(sorted(TERMINAL_STATUSES)))
        first = (
            update(runs)
            .where(*open_run, runs.c.started_at.is_(None))
            .values(status=RunStatus.RUNNING.value, started_at=literal(utcnow(), UtcDateTime()))
            .returning(runs.c.runnable)
        )
        again = update(runs).where(*open_run).values(status=RunStatus.RUNNING.value).returning(runs.c.id)
        # Each statement is atomic by itself (a run's first start is the common case: one round trip
        # on PostgreSQL, see dialects.one_statement); the others only run when it matched nothing.
        with one_statement(self.engine) as connection, connection.begin():
            started = connection.execute(first).first()
            marked = started is not None or connection.execute(again).first() is not None
            if (
                not marked
                and connection.execute(select(runs.c.id).where(runs.c.id == run_id)).first() is None
            ):
                raise RunNotFoundError(run_id)
        return marked, None if started is None else str(started.runnable)

    @retried
    def _finish_run(self, asked: Finish) -> Ended | Refused:
        run_id, owner_token, ended = asked.run_id, asked.owner_token, asked.ended
        final, stored_output, stored_error = asked.outcome
        statement = (
            update(runs)
            .where(
                runs.c.id == run_id,
                runs.c.status.not_in(sorted(TERMINAL_STATUSES)),
                or_(runs.c.owner_token.is_(None), runs.c.owner_token == (owner_token or "")),
            )
            .values(
                status=final,
                output=stored_output,
                error=stored_error,
                finished_at=ended,
                stopped_by=asked.stopped_by,
            )
            .returning(runs.c.runnable, runs.c.started_at, runs.c.created_at)
        )
        read = select(*_RUN_COLUMNS, runs.c.launch_digest, runs.c.owner_token).where(runs.c.id == run_id)
        # One statement in the common case (one round trip on PostgreSQL: dialects.one_statement);
        # the read, of a refusal only, needs no transaction with it.
        with one_statement(self.engine) as connection, connection.begin():
            finished = connection.execute(statement).first()
            if finished is None:
                row = connection.execute(read).first()
        if finished is not None:
            return Ended(finished.runnable, finished.started_at or finished.created_at)
        return Refused(None, None) if row is None else Refused(*_record_and_owner(row._mapping))

    @retried
    def _get_run(self, run_id: str) -> RunRecord | None:
        found = run_fixed(self.engine, _RUN, {"run_id": run_id})
        return _record(found[0]) if found else None

    @retried
    def _list_runs(self, query: RunQuery) -> list[RunRecord]:
        statement = (
            select(*_RUN_COLUMNS)
            .order_by(runs.c.created_at.desc(), runs.c.id.desc())
            .limit(query.limit)
            .offset(query.offset)
        )
        for name in ("status", "runnable", "parent_run_id", "principal"):
            wanted = getattr(query, name)
            if wanted is not None:
                statement = statement.where(runs.c[name] == wanted)
        with one_statement(self.engine) as connection:
            return [_record(row) for row in connection.execute(statement)]

    @retried
    def _child_counts(self, parent_run_id: str) -> list[tuple[str, int, list[int]]]:
        sums = [func.sum(runs.c[name]) for name in CHILD_SUMS]
        statement = (
            select(runs.c.status, func.count(), *sums)
            .where(runs.c.parent_run_id == parent_run_id)
            .group_by(runs.c.status)
        )
        with one_statement(self.engine) as connection:
            return [
                (str(status), int(count), [int(value or 0) for value in values])
                for status, count, *values in connection.execute(statement)
            ]

    def _count_runs(self, statuses: frozenset[str]) -> dict[tuple[str, str], int]:
        """Not retried (``RunStoreBase.count_open_runs``)."""
        statement = (
            select(runs.c.runnable, runs.c.status, func.count())
            .where(runs.c.status.in_(sorted(statuses)))
            .group_by(runs.c.runnable, runs.c.status)
        )
        with one_statement(self.engine) as connection:
            return {(str(name), str(status)): int(n) for name, status, n in connection.execute(statement)}

    @retried
    def _append_events(self, root_run_id: str, rows: Rows) -> None:
        """One transaction; on PostgreSQL one statement under the run's lock when none fails
        (``dialects.py``), else ``dialects.insert_events_failing_once``."""
        if self.dialect == "postgresql" and not _fails(rows):
            run_fixed(self.engine, PG_APPEND_EVENTS, pg_event_batch(root_run_id, rows))
            return
        with self.engine.begin() as connection:
            _insert_events(connection, root_run_id, rows)

    @retried
    def _events(self, query: EventQuery) -> list[tuple[int, dict[str, Any]]]:
        """Filtered by the database."""
        statement = (
            select(run_events.c.id, run_events.c.payload)
            .where(run_events.c.run_id == query.run_id, run_events.c.id > query.after_id)
            .order_by(run_events.c.id)
        )
        if query.phases is not None and len(query.phases) == 1:
            statement = statement.where(run_events.c.phase == query.phases[0])
        elif query.phases is not None:
            statement = statement.where(run_events.c.phase.in_(query.phases))
        if query.status is not None:
            statement = statement.where(run_events.c.status == query.status)
        if query.ends:  # base.judges_the_end, in the database: a failure, or a loop stopped at its bound
            stopped_by = run_events.c.payload[("data", "stopped_by")].as_string()
            statement = statement.where(
                or_(run_events.c.phase == MODEL_UNAVAILABLE, stopped_by == STOPPED_BY_BOUND)
            )
        if query.limit is not None:
            statement = statement.limit(query.limit)
        with one_statement(self.engine) as connection:
            return [(int(event_id), payload) for event_id, payload in connection.execute(statement)]

    @staticmethod
    def _run_and_root(run_id: str) -> ColumnElement[bool]:
        root = select(runs.c.root_run_id).where(runs.c.id == run_id).scalar_subquery()
        return or_(runs.c.id == run_id, runs.c.id == root)

    @retried
    def _request_cancel(self, run_id: str) -> None:
        statement = update(runs).where(self._run_and_root(run_id)).values(cancel_requested=True)
        with self.engine.begin() as connection:
            if connection.execute(statement.returning(runs.c.id)).first() is None:
                raise RunNotFoundError(run_id)

    @retried
    def _is_cancel_requested(self, run_id: str) -> bool:
        statement = select(runs.c.id).where(self._run_and_root(run_id), runs.c.cancel_requested).limit(1)
        with one_statement(self.engine) as connection:
            return connection.execute(statement).first() is not None

    @retried
    def _add_counts(self, run_id: str, counts: dict[str, int]) -> dict[str, int]:
        """``SET x = x + :n`` for each of ``counts``, returning the new totals, in one statement."""
        statement = _added_counts(run_id, counts).returning(*(runs.c[name] for name in counts))
        with one_statement(self.engine) as connection, connection.begin():
            row = connection.execute(statement).first()
        if row is None:
            raise RunNotFoundError(run_id)
        return {name: int(value) for name, value in zip(counts, row, strict=True)}

    @retried
    def _save_checkpoint(self, row: dict[str, Any]) -> None:
        """One upsert: one row per (run, path)."""
        with one_statement(self.engine) as connection, connection.begin():
            connection.execute(self._upserts.save_checkpoint, row)

    @retried
    def _save_checkpoints(self, run_id: str, rows: Rows, events: Rows, tokens: dict[str, int]) -> None:
        """One transaction; on PostgreSQL one statement."""
        if self.dialect == "postgresql" and not _fails(events):  # one statement (dialects.py)
            saved = [{key: row[key] for key in ("path", "iteration", "state")} for row in rows]
            params = {
                **pg_event_batch(run_id, events),
                **tokens,
                "run_id": run_id,
                "checkpoints": saved,
                "updated_at": rows[0]["updated_at"] if rows else utcnow(),
            }
            run_fixed(self.engine, PG_SAVE_CHECKPOINTS, params)
            return
        with self.engine.begin() as connection:  # the events, the usage, the checkpoints: one transaction
            _insert_events(connection, run_id, events)
            if any(tokens.values()):
                connection.execute(_added_counts(run_id, tokens))
            if rows:
                connection.execute(self._upserts.save_checkpoint, rows)

    @retried
    def _loop_record(self, run_id: str, path: str) -> LoopRecord:
        found = run_fixed(self.engine, _ONE_LOOP_RECORD, {"run_id": run_id, "path": path})
        return _record_of_loop(found[0] if found else None)

    @retried
    def _loop_records(self, run_id: str, paths: Sequence[str]) -> list[LoopRecord]:
        """One read per 500 paths."""
        rows: dict[str, Sequence[Any]] = {}
        with one_statement(self.engine) as connection:
            for start in range(0, len(paths), 500):
                chunk = list(paths[start : start + 500])
                statement = _LOOP_RECORD.add_columns(checkpoints.c.path).where(
                    checkpoints.c.run_id == run_id, checkpoints.c.path.in_(chunk)
                )
                rows.update((row.path, row) for row in connection.execute(statement))
        return [_record_of_loop(rows.get(path)) for path in paths]

    @retried
    def _start_loops(self, run_id: str, paths: Sequence[str]) -> list[StartedLoop]:
        """One ``INSERT ... ON CONFLICT ... RETURNING`` per 500 paths, in one transaction (retried
        after a lost connection, a delivery may be counted twice: the limit then comes sooner); on
        PostgreSQL one statement whose text never changes (a pack's 200 rows as a multi-row
        ``VALUES`` were a new text of 1,000 parameters, parsed anew by psycopg for every pack)."""
        rows: dict[str, Row[Any]] = {}
        unique = list(dict.fromkeys(paths))
        if self.dialect == "postgresql":
            listed = [{"run_id": run_id, "path": path} for path in unique]
            returned = run_fixed(self.engine, PG_START_RUNS_LOOPS, {"loops": listed, "updated_at": utcnow()})
            rows.update((str(row.path), row) for row in returned)
            return [_started(rows[path]) for path in paths]
        with self.engine.begin() as connection:
            for start in range(0, len(unique), 500):
                chunk = [
                    {"run_id": run_id, "path": path, "deliveries": 1, "updated_at": utcnow()}
                    for path in unique[start : start + 500]
                ]
                for row in connection.execute(self._upserts.start_loops, chunk):
                    rows[row.path] = row
        return [_started(rows[path]) for path in paths]

    @retried
    def _finish_loop(self, ends: LoopEnds) -> JsonValue:
        """SQLite: the events, the usage and the result in one transaction; PostgreSQL: one statement."""
        if self.dialect != "postgresql":
            with self.engine.begin() as connection:
                return self._finished(connection, ends)
        if not ends.events and not ends.used:  # no events: not under the root run's event lock
            with one_statement(self.engine) as connection, connection.begin():
                return self._finished(connection, ends)
        (finished,) = run_fixed(self.engine, PG_FINISH_LOOP, _pg_loop_end(ends))  # one statement
        return finished.result

    @retried
    def _finish_loop_then_start(self, ends: LoopEnds, next_path: str) -> tuple[JsonValue, StartedLoop]:
        """The loop's end (:meth:`_finished`) and the next loop's start, in one transaction; on
        PostgreSQL one statement (``PG_FINISH_LOOP_THEN_START``): one round trip, not four."""
        if self.dialect == "postgresql":
            params = {**_pg_loop_end(ends), "next_path": next_path}
            (both,) = run_fixed(self.engine, PG_FINISH_LOOP_THEN_START, params)
            record = _record_of_loop(
                (both.next_finished, both.next_result, both.next_iteration, both.next_state)
            )
            return both.result, StartedLoop(record, int(both.next_deliveries))
        start = {"run_id": ends.run_id, "path": next_path, "deliveries": 1, "updated_at": utcnow()}
        with self.engine.begin() as connection:
            recorded = self._finished(connection, ends)
            return recorded, _started(connection.execute(self._upserts.start_loops, start).one())

    def _finished(self, connection: Connection, ends: LoopEnds) -> JsonValue:
        """Record one loop's end (``ends``: its events, usage and result) on ``connection``, in its
        transaction (on PostgreSQL only an end without events or usage): the result as recorded."""
        (row,) = ends.loops
        if ends.events:
            connection.execute(run_events.insert(), ends.events)
        if ends.used:
            connection.execute(_added_counts(ends.run_id, ends.tokens))
        return connection.execute(self._upserts.finish_loop, row).scalar_one()

    @retried
    def _finish_loops(self, ends: LoopEnds) -> list[JsonValue]:
        """One transaction: the events in one statement, the results in one multi-row upsert; on
        PostgreSQL all in one statement."""
        run_id, loops, rows = ends.run_id, ends.loops, ends.events
        recorded: dict[str, JsonValue] = {}
        if self.dialect == "postgresql":  # one statement (dialects.py)
            params = {
                **pg_event_batch(run_id, rows),
                **ends.tokens,
                "run_id": run_id,
                "loops": [{"path": row["path"], "result": row["result"]} for row in loops],
                "updated_at": loops[0]["updated_at"] if loops else utcnow(),
            }
            recorded.update((path, value) for path, value in run_fixed(self.engine, PG_FINISH_LOOPS, params))
            return [recorded[row["path"]] for row in loops]
        with self.engine.begin() as connection:
            if rows:
                connection.execute(run_events.insert(), rows)
            if ends.used:
                connection.execute(_added_counts(run_id, ends.tokens))
            if loops:
                returned = connection.execute(self._upserts.finish_loops, loops)
                recorded.update((path, value) for path, value in returned)
        return [recorded[row["path"]] for row in loops]

    # the bulk steps of a packed batch (store/bulk.py): one statement, or one transaction, each;
    # on PostgreSQL each statement's text is the same for any number of runs

    @retried
    def _insert_runs(self, rows: list[tuple[dict[str, Any], RunOwner | None]]) -> list[bool]:
        params = [
            {
                **values,
                "launch_digest": None if owner is None else owner.launch_digest,
                "owner_token": None if owner is None else owner.token,
            }
            for values, owner in rows
        ]
        if self.dialect == "postgresql":
            statement = pg_insert_runs(tuple(params[0]))  # every row has the same columns
            created = {str(row.id) for row in run_fixed(self.engine, statement, pg_run_rows(params))}
        else:
            with self.engine.begin() as connection:
                created = {str(row.id) for row in connection.execute(self._upserts.create_run, params)}
        return [values["id"] in created for values, _ in rows]

    @retried
    def _runs_and_owners(self, run_ids: list[str]) -> dict[str, tuple[RunRecord, RunOwner | None]]:
        found: dict[str, tuple[RunRecord, RunOwner | None]] = {}
        with one_statement(self.engine) as connection:
            for chunk in id_chunks(run_ids):
                for row in connection.execute(_RUNS_AND_OWNERS, {"ids": chunk}):
                    found[str(row.id)] = _record_and_owner(row._mapping)
        return found

    @retried
    def _mark_runs_running(self, run_ids: list[str]) -> tuple[set[str], list[str]]:
        marked: set[str] = set()
        first_starts: list[str] = []
        if self.dialect == "postgresql":
            for row in run_fixed(self.engine, PG_MARK_RUNS_RUNNING, {"ids": run_ids, "now": utcnow()}):
                marked.add(str(row.id))
                if row.first_start:
                    first_starts.append(str(row.runnable))
            return marked, first_starts
        with self.engine.begin() as connection:
            for chunk in id_chunks(run_ids):
                params = {"ids": chunk, "now": utcnow()}
                first_starts += [str(row.runnable) for row in connection.execute(_FIRST_STARTS, params)]
                marked.update(str(row.id) for row in connection.execute(_MARK_RUNNING, params))
        return marked, first_starts

    @retried
    def _start_runs_loops(self, loops: list[tuple[str, str]]) -> list[StartedLoop]:
        now = utcnow()
        if self.dialect == "postgresql":
            listed = [{"run_id": run_id, "path": path} for run_id, path in loops]
            returned = run_fixed(self.engine, PG_START_RUNS_LOOPS, {"loops": listed, "updated_at": now})
            started = {(str(row.run_id), str(row.path)): _started(row) for row in returned}
            return [started[loop] for loop in loops]
        rows = [{"run_id": run, "path": path, "deliveries": 1, "updated_at": now} for run, path in loops]
        with self.engine.begin() as connection:
            upserted = connection.execute(bulk_upserts(self.dialect).start_runs_loops, rows)
            started = {(str(row.run_id), str(row.path)): _started(row) for row in upserted}
        return [started[loop] for loop in loops]

    @retried
    def _finish_runs_loops(self, ends: list[LoopEnd]) -> list[JsonValue]:
        events = [event_rows(end.run_id, end.events) for end in ends]
        loops = [loop_row(end.run_id, end.path, result=end.result) for end in ends]
        if self.dialect == "postgresql" and not any(_fails(rows) for rows in events):
            return self._pg_finish_runs_loops(ends, events, loops)
        with self.engine.begin() as connection:
            for end, rows in zip(ends, events, strict=True):  # each level fails once: run by run
                _insert_events(connection, end.run_id, rows)
            for end in ends:
                if end.input_tokens or end.output_tokens:
                    tokens = {"input_tokens": end.input_tokens, "output_tokens": end.output_tokens}
                    connection.execute(_added_counts(end.run_id, tokens))
            returned = connection.execute(bulk_upserts(self.dialect).finish_runs_loops, loops)
            recorded = {(str(row.run_id), str(row.path)): row.result for row in returned}
        return [recorded[(end.run_id, end.path)] for end in ends]

    def _pg_finish_runs_loops(
        self, ends: list[LoopEnd], events: list[list[dict[str, Any]]], loops: list[dict[str, Any]]
    ) -> list[JsonValue]:
        """:meth:`_finish_runs_loops` on PostgreSQL: one statement (``bulk_sql.PG_FINISH_RUNS_LOOPS``)."""
        columns = ("run_id", "payload", "path", "status", "phase", "iteration")
        now = utcnow()
        params = {
            "lock_keys": pg_lock_keys([end.run_id for end, rows in zip(ends, events, strict=True) if rows]),
            "created_at": now,
            "events": [{name: row[name] for name in columns} for rows in events for row in rows],
            "usage": [
                {"id": end.run_id, "input_tokens": end.input_tokens, "output_tokens": end.output_tokens}
                for end in ends
                if end.input_tokens or end.output_tokens
            ],
            "loops": [{key: row[key] for key in ("run_id", "path", "result")} for row in loops],
            "updated_at": now,
        }
        returned = run_fixed(self.engine, PG_FINISH_RUNS_LOOPS, params)
        recorded = {(str(row.run_id), str(row.path)): row.result for row in returned}
        return [recorded[(end.run_id, end.path)] for end in ends]

    @retried
    def _runs_events(self, run_ids: list[str], phase: list[str]) -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = {}
        with one_statement(self.engine) as connection:
            for chunk in id_chunks([run_id for run_id in run_ids if is_storable_id(run_id)]):
                for run_id, payload in connection.execute(_RUNS_EVENTS, {"ids": chunk, "phases": phase}):
                    found.setdefault(str(run_id), []).append(payload)
        return found

    @retried
    def _finish_runs(self, asked: list[Finish]) -> list[Ended | Refused]:
        ended: dict[str, Ended] = {}
        if self.dialect == "postgresql":  # one statement, in autocommit
            for row in run_fixed(self.engine, PG_FINISH_RUNS, pg_finish_runs(asked)):
                ended[str(row.id)] = Ended(row.runnable, row.started_at or row.created_at)
        else:
            with self.engine.begin() as connection:
                for one in asked:
                    for row in connection.execute(FINISH_ONE_RUN, finish_one_run(one)):
                        ended[str(row.id)] = Ended(row.runnable, row.started_at or row.created_at)
        left = [one.run_id for one in asked if one.run_id not in ended]
        refused = self._runs_and_owners(left) if left else {}  # what each refusal is checked against
        return [ended.get(one.run_id) or Refused(*refused.get(one.run_id, (None, None))) for one in asked]


_RUNS_AND_OWNERS = select(*_RUN_COLUMNS, runs.c.launch_digest, runs.c.owner_token).where(runs.c.id.in_(IDS))
_OPEN_RUNS = (runs.c.id.in_(IDS), runs.c.status.not_in(sorted(TERMINAL_STATUSES)))
_FIRST_STARTS = (
    update(runs)
    .where(*_OPEN_RUNS, runs.c.started_at.is_(None))
    .values(status=RunStatus.RUNNING.value, started_at=bindparam("now", type_=UtcDateTime()))
    .returning(runs.c.runnable)
)
_MARK_RUNNING = update(runs).where(*_OPEN_RUNS).values(status=RunStatus.RUNNING.value).returning(runs.c.id)
_RUNS_EVENTS = (
    select(run_events.c.run_id, run_events.c.payload)
    .where(run_events.c.run_id.in_(IDS), run_events.c.phase.in_(bindparam("phases", expanding=True)))
    .order_by(run_events.c.id)
)


def _added_counts(run_id: str, counts: Mapping[str, int]) -> Update:
    """``UPDATE runs`` adding each of ``counts`` (checked) to run ``run_id``'s column of that name
    (``SET x = x + :n``)."""
    return (
        update(runs).where(runs.c.id == run_id).values({name: runs.c[name] + n for name, n in counts.items()})
    )

"""``SqlRunStore``: runs, progress events, usage, cancellation and checkpoints in SQL.

SQLAlchemy Core on plain connections, no ORM session. Every write is one
atomic statement (``INSERT ... ON CONFLICT``, ``UPDATE ... SET x = x + :n ...
RETURNING``) or a few in one short transaction, so several worker processes
can share the database: on SQLite the writes serialise on the file lock (WAL
mode, busy timeout), on PostgreSQL on row locks. Every call is retried while
the database is unreachable (:class:`~agentloop.orchestration.store.retry.StoreRetry`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Row,
    RowMapping,
    Update,
    func,
    literal,
    or_,
    select,
    update,
)

from agentloop.orchestration.errors import RunExistsError, RunNotFoundError
from agentloop.orchestration.store.base import Ended, Finish, Refused, RunStoreBase
from agentloop.orchestration.store.checks import (
    check_count,
    event_rows,
    is_storable_id,
    loop_row,
)
from agentloop.orchestration.store.concurrency import SqlConcurrencySlots
from agentloop.orchestration.store.dialects import (
    PG_APPEND_EVENTS,
    PG_FINISH_LOOP,
    PG_FINISH_LOOPS,
    PG_SAVE_CHECKPOINTS,
    dialect_of,
    insert_events_failing_once,
    one_statement,
    pg_event_batch,
    upserts,
)
from agentloop.orchestration.store.json_values import JsonValue
from agentloop.orchestration.store.protocol import (
    CHILD_SUMS,
    OPEN_STATUSES,
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
from agentloop.orchestration.store.unless_open import insert_unless_open, root_run_values

_RUN_COLUMNS = tuple(runs.c[field.name] for field in fields(RunRecord))
_LOOP_RECORD = select(
    checkpoints.c.finished, checkpoints.c.result, checkpoints.c.iteration, checkpoints.c.state
)


def _loop_record(row: Sequence[Any] | None) -> LoopRecord:
    """A loop's record from a :data:`_LOOP_RECORD` row (``None``: nothing recorded yet)."""
    if row is None:
        return LoopRecord(finished=False, result=None, checkpoint=None)
    finished, result, iteration, state = row[0], row[1], row[2], row[3]
    return LoopRecord(
        finished=bool(finished),
        result=result if finished else None,
        checkpoint=None if iteration is None else (iteration, state),
    )


def _started(row: Row[Any]) -> StartedLoop:
    """A loop's record, with its count of deliveries, from a ``start_loops`` row."""
    record = _loop_record((row.finished, row.result, row.iteration, row.state))
    return StartedLoop(record, int(row.deliveries))


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


def _record(row: Row[Any]) -> RunRecord:
    return RunRecord(**row._mapping)


def _record_and_owner(columns: RowMapping) -> tuple[RunRecord, RunOwner | None]:
    values = dict(columns)
    digest, token = values.pop("launch_digest"), values.pop("owner_token")
    owner = None if token is None else RunOwner(launch_digest=digest or "", token=token)
    return RunRecord(**values), owner


class SqlRunStore(RunStoreBase):
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
        self.recordings = SqlRecordingStore(engine, dialect=self.dialect, retry=self.retry)
        """The entries of recorded runs (``run_recordings``), in the same database."""
        self.concurrency = SqlConcurrencySlots(engine, dialect=self.dialect, retry=self.retry)
        """The slots of concurrency keys (``concurrency_slots``), in the same database."""

    @retried
    def _insert_run(self, values: dict[str, Any], owner: RunOwner | None) -> RunRecord:
        owned = {"launch_digest": owner.launch_digest, "owner_token": owner.token} if owner else {}
        with self.engine.begin() as connection:
            created = connection.execute(self._upserts.create_run, {**values, **owned}).first() is not None
            record = _record(connection.execute(select(*_RUN_COLUMNS).where(runs.c.id == values["id"])).one())
        if not created:
            raise RunExistsError(record)
        return record

    @retried
    def create_run_unless_open(
        self, *, run_id: str, runnable: str, input: JsonValue, celery_task_id: str | None = None
    ) -> RunRecord:
        """Record pending run ``run_id`` unless a run of ``runnable`` is open; see the protocol."""
        values = root_run_values(run_id, runnable, input, celery_task_id)
        with self.engine.begin() as connection:
            return _record(insert_unless_open(connection, self.dialect, values))

    @retried
    def run_owner(self, run_id: str) -> RunOwner | None:
        """The owner the run was created with (``None``: anyone may end it)."""
        statement = select(runs.c.launch_digest, runs.c.owner_token).where(runs.c.id == run_id)
        with one_statement(self.engine) as connection:
            row = connection.execute(statement).first()
        if row is None:
            raise RunNotFoundError(run_id)
        digest, token = row
        return None if token is None else RunOwner(launch_digest=digest or "", token=token)

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
        with self.engine.begin() as connection:
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
        with self.engine.begin() as connection:
            finished = connection.execute(statement).first()
            if finished is None:
                row = connection.execute(read).first()
        if finished is not None:
            return Ended(finished.runnable, finished.started_at or finished.created_at)
        return Refused(None, None) if row is None else Refused(*_record_and_owner(row._mapping))

    @retried
    def get_run(self, run_id: str) -> RunRecord | None:
        """The run, or ``None``."""
        if not is_storable_id(run_id):
            return None
        with one_statement(self.engine) as connection:
            row = connection.execute(select(*_RUN_COLUMNS).where(runs.c.id == run_id)).first()
        return None if row is None else _record(row)

    @retried
    def list_runs(
        self,
        *,
        limit: int = 50,
        status: str | None = None,
        runnable: str | None = None,
        parent_run_id: str | None = None,
        principal: str | None = None,
        offset: int = 0,
    ) -> list[RunRecord]:
        """The most recently created runs first, optionally filtered, after skipping ``offset``."""
        statement = (
            select(*_RUN_COLUMNS)
            .order_by(runs.c.created_at.desc(), runs.c.id.desc())
            .limit(check_count(limit, "limit"))
            .offset(check_count(offset, "offset"))
        )
        if status is not None:
            statement = statement.where(runs.c.status == str(status))
        if runnable is not None:
            statement = statement.where(runs.c.runnable == str(runnable))
        if parent_run_id is not None:
            statement = statement.where(runs.c.parent_run_id == str(parent_run_id))
        if principal is not None:
            statement = statement.where(runs.c.principal == str(principal))
        with one_statement(self.engine) as connection:
            return [_record(row) for row in connection.execute(statement)]

    @retried
    def summarize_children(self, parent_run_id: str) -> dict[str, Any]:
        """Counts per status, and the :data:`CHILD_SUMS`, of the runs whose parent is ``parent_run_id``."""
        sums = [func.sum(runs.c[name]) for name in CHILD_SUMS]
        statement = (
            select(runs.c.status, func.count(), *sums)
            .where(runs.c.parent_run_id == str(parent_run_id))
            .group_by(runs.c.status)
        )
        by_status: dict[str, int] = {}
        totals = dict.fromkeys(CHILD_SUMS, 0)
        with one_statement(self.engine) as connection:
            for status, count, *values in connection.execute(statement):
                by_status[str(status)] = int(count)
                for name, value in zip(CHILD_SUMS, values, strict=True):
                    totals[name] += int(value or 0)
        return {"total": sum(by_status.values()), "by_status": by_status, **totals}

    def count_open_runs(self) -> dict[tuple[str, str], int]:
        """Runs not ended (pending, running, waiting), by ``(runnable, status)``. Tried once, not
        retried: a scrape answers now or leaves the gauge out (``orchestration/metrics/fleet.py``)."""
        statement = (
            select(runs.c.runnable, runs.c.status, func.count())
            .where(runs.c.status.in_(sorted(OPEN_STATUSES)))
            .group_by(runs.c.runnable, runs.c.status)
        )
        with one_statement(self.engine) as connection:
            return {(str(name), str(status)): int(n) for name, status, n in connection.execute(statement)}

    @retried
    def append_events(self, root_run_id: str, events: Sequence[Mapping[str, Any]]) -> None:
        """Store progress events under ``root_run_id`` in one transaction, in order (a path's second
        ``failed`` event is left out: ``dialects.insert_events_failing_once``)."""
        rows = event_rows(root_run_id, events)
        if not rows:
            return
        if self.dialect == "postgresql" and not _fails(
            rows
        ):  # one statement under the run's lock (dialects.py)
            with one_statement(self.engine) as connection, connection.begin():
                connection.execute(PG_APPEND_EVENTS, pg_event_batch(root_run_id, rows))
            return
        with self.engine.begin() as connection:
            _insert_events(connection, root_run_id, rows)

    @retried
    def events(
        self,
        run_id: str,
        *,
        after_id: int = 0,
        limit: int | None = None,
        phase: str | Sequence[str] | None = None,
        status: str | None = None,
    ) -> list[tuple[int, dict[str, Any]]]:
        """The events of root run ``run_id`` with an id above ``after_id``, oldest first (only
        those of ``phase``, or of any of several, and ``status`` when given, chosen by the database)."""
        if not is_storable_id(run_id):
            return []
        statement = (
            select(run_events.c.id, run_events.c.payload)
            .where(run_events.c.run_id == run_id, run_events.c.id > after_id)
            .order_by(run_events.c.id)
        )
        if isinstance(phase, str):
            statement = statement.where(run_events.c.phase == phase)
        elif phase is not None:
            statement = statement.where(run_events.c.phase.in_(list(phase)))
        if status is not None:
            statement = statement.where(run_events.c.status == status)
        if limit is not None:
            statement = statement.limit(check_count(limit, "limit"))
        with one_statement(self.engine) as connection:
            return [(int(event_id), payload) for event_id, payload in connection.execute(statement)]

    @staticmethod
    def _run_and_root(run_id: str) -> ColumnElement[bool]:
        root = select(runs.c.root_run_id).where(runs.c.id == run_id).scalar_subquery()
        return or_(runs.c.id == run_id, runs.c.id == root)

    @retried
    def request_cancel(self, run_id: str) -> None:
        """Ask the whole workflow of ``run_id`` to stop: flags the run and its root run."""
        statement = update(runs).where(self._run_and_root(run_id)).values(cancel_requested=True)
        with self.engine.begin() as connection:
            if connection.execute(statement.returning(runs.c.id)).first() is None:
                raise RunNotFoundError(run_id)

    @retried
    def is_cancel_requested(self, run_id: str) -> bool:
        """Whether cancellation was requested for the run or its root run (``False`` if unknown)."""
        if not is_storable_id(run_id):
            return False
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
    def save_checkpoint(self, run_id: str, path: str, iteration: int, state: JsonValue) -> None:
        """Replace the loop's checkpoint with ``(iteration, state)``: one row per (run, path)."""
        row = loop_row(run_id, path, checkpoint=(iteration, state))
        with one_statement(self.engine) as connection, connection.begin():
            connection.execute(self._upserts.save_checkpoint, row)

    @retried
    def save_checkpoints(
        self,
        run_id: str,
        checkpoints: Sequence[tuple[str, int, JsonValue]],
        *,
        events: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """:meth:`save_checkpoint` for each ``(path, iteration, state)`` with ``events`` appended
        first: one transaction; on PostgreSQL one statement."""
        rows = [
            loop_row(run_id, path, checkpoint=(iteration, state)) for path, iteration, state in checkpoints
        ]
        event_batch = event_rows(run_id, events)
        if not rows and not event_batch:
            return
        if self.dialect == "postgresql" and not _fails(event_batch):  # one statement (dialects.py)
            saved = [{key: row[key] for key in ("path", "iteration", "state")} for row in rows]
            params = {
                **pg_event_batch(run_id, event_batch),
                "run_id": run_id,
                "checkpoints": saved,
                "updated_at": rows[0]["updated_at"] if rows else utcnow(),
            }
            with one_statement(self.engine) as connection, connection.begin():
                connection.execute(PG_SAVE_CHECKPOINTS, params)
            return
        with self.engine.begin() as connection:  # the events, then the checkpoints: one transaction
            _insert_events(connection, run_id, event_batch)
            if rows:
                connection.execute(self._upserts.save_checkpoint, rows)

    @retried
    def loop_record(self, run_id: str, path: str) -> LoopRecord:
        """Whether the loop at ``path`` finished, its result, and its latest checkpoint, in one read."""
        statement = _LOOP_RECORD.where(checkpoints.c.run_id == run_id, checkpoints.c.path == path)
        with one_statement(self.engine) as connection:
            row = connection.execute(statement).first()
        return _loop_record(row)

    @retried
    def loop_records(self, run_id: str, paths: Sequence[str]) -> list[LoopRecord]:
        """:meth:`loop_record` of each of ``paths``, in their order: one read per 500 paths."""
        rows: dict[str, Sequence[Any]] = {}
        with one_statement(self.engine) as connection:
            for start in range(0, len(paths), 500):
                chunk = list(paths[start : start + 500])
                statement = _LOOP_RECORD.add_columns(checkpoints.c.path).where(
                    checkpoints.c.run_id == run_id, checkpoints.c.path.in_(chunk)
                )
                rows.update((row.path, row) for row in connection.execute(statement))
        return [_loop_record(rows.get(path)) for path in paths]

    @retried
    def start_loops(self, run_id: str, paths: Sequence[str]) -> list[StartedLoop]:
        """Count one more delivery of each loop at ``paths`` and return its record, in their order:
        one ``INSERT ... ON CONFLICT ... RETURNING`` per 500 paths, in one transaction (retried
        after a lost connection, a delivery may be counted twice: the limit then comes sooner)."""
        rows: dict[str, Row[Any]] = {}
        unique = list(dict.fromkeys(paths))
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
    def finish_loop(
        self,
        run_id: str,
        path: str,
        result: JsonValue,
        *,
        events: Sequence[Mapping[str, Any]] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> JsonValue:
        """Record the loop's result (its checkpoint is kept), append ``events`` under ``run_id``
        and add the tokens to the run's usage, in one transaction; the first result recorded
        stands and is returned."""
        statements = self._finished(run_id, path, result, events, input_tokens, output_tokens)
        if self.dialect != "postgresql":  # SQLite: the events, the usage and the result, one transaction
            with self.engine.begin() as connection:
                return statements(connection)
        with one_statement(self.engine) as connection, connection.begin():  # one statement (dialects.py)
            return statements(connection)

    @retried
    def finish_loop_then_start(
        self,
        run_id: str,
        path: str,
        result: JsonValue,
        next_path: str,
        *,
        events: Sequence[Mapping[str, Any]] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> tuple[JsonValue, StartedLoop]:
        """:meth:`finish_loop`, then :meth:`start_loops` of ``next_path``, in one transaction."""
        statements = self._finished(run_id, path, result, events, input_tokens, output_tokens)
        start = {"run_id": run_id, "path": next_path, "deliveries": 1, "updated_at": utcnow()}
        with self.engine.begin() as connection:
            recorded = statements(connection)
            return recorded, _started(connection.execute(self._upserts.start_loops, start).one())

    def _finished(
        self,
        run_id: str,
        path: str,
        result: JsonValue,
        events: Sequence[Mapping[str, Any]],
        input_tokens: int,
        output_tokens: int,
    ) -> Callable[[Connection], JsonValue]:
        """The statements that record a loop's result with its events and usage (checked here),
        to run in a transaction; they return the result as recorded."""
        row = loop_row(run_id, path, result=result)
        rows = event_rows(run_id, events)
        tokens = {
            "input_tokens": check_count(input_tokens, "input_tokens"),
            "output_tokens": check_count(output_tokens, "output_tokens"),
        }

        def run(connection: Connection) -> JsonValue:
            if self.dialect != "postgresql":
                if rows:
                    connection.execute(run_events.insert(), rows)
                if input_tokens or output_tokens:
                    connection.execute(_added_counts(run_id, tokens))
                return connection.execute(self._upserts.finish_loop, row).scalar_one()
            if not rows and not (input_tokens or output_tokens):
                return connection.execute(self._upserts.finish_loop, row).scalar_one()
            batch = pg_event_batch(run_id, rows)
            return connection.execute(PG_FINISH_LOOP, {**row, **batch, **tokens}).scalar_one()

        return run

    @retried
    def finish_loops(
        self,
        run_id: str,
        results: Sequence[tuple[str, JsonValue]],
        *,
        events: Sequence[Mapping[str, Any]] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> list[JsonValue]:
        """Record several loops' results (a first result stands, per loop), append ``events``
        under ``run_id`` and add the tokens to the run's usage, in one transaction: the events in
        one statement, the results in one multi-row upsert; the results as recorded, in order."""
        loops = [loop_row(run_id, path, result=result) for path, result in results]
        rows = event_rows(run_id, events)
        tokens = {
            "input_tokens": check_count(input_tokens, "input_tokens"),
            "output_tokens": check_count(output_tokens, "output_tokens"),
        }
        recorded: dict[str, JsonValue] = {}
        if not (loops or rows or input_tokens or output_tokens):
            return []
        if self.dialect == "postgresql":  # one statement (dialects.py)
            params = {
                **pg_event_batch(run_id, rows),
                **tokens,
                "run_id": run_id,
                "loops": [{"path": row["path"], "result": row["result"]} for row in loops],
                "updated_at": loops[0]["updated_at"] if loops else utcnow(),
            }
            with one_statement(self.engine) as connection, connection.begin():
                recorded.update((path, value) for path, value in connection.execute(PG_FINISH_LOOPS, params))
            return [recorded[row["path"]] for row in loops]
        with self.engine.begin() as connection:
            if rows:
                connection.execute(run_events.insert(), rows)
            if input_tokens or output_tokens:
                connection.execute(_added_counts(run_id, tokens))
            if loops:
                returned = connection.execute(self._upserts.finish_loops, loops)
                recorded.update((path, value) for path, value in returned)
        return [recorded[row["path"]] for row in loops]


def _added_counts(run_id: str, counts: Mapping[str, int]) -> Update:
    """``UPDATE runs`` adding each of ``counts`` (checked) to run ``run_id``'s column of that name
    (``SET x = x + :n``)."""
    return (
        update(runs).where(runs.c.id == run_id).values({name: runs.c[name] + n for name, n in counts.items()})
    )

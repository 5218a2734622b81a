"""``SqlRunStore``: runs, progress events, usage, cancellation and checkpoints in SQL.

Every write is one atomic statement (``INSERT ... ON CONFLICT``,
``UPDATE ... SET x = x + :n ... RETURNING``) in its own short transaction, so
several worker processes can share the database: on SQLite the writes
serialise on the file lock (WAL mode, busy timeout), on PostgreSQL on row locks.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Table, bindparam, func, literal, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from orchestration.store.jsondata import JsonValue, to_json_value
from orchestration.store.protocol import (
    TERMINAL_STATUSES,
    RunNotFoundError,
    RunRecord,
    RunStatus,
    check_count,
    check_terminal_status,
    error_value,
)
from orchestration.store.sqlbase import SqlStoreBase
from orchestration.store.tables import Checkpoint, Run, RunEvent, UtcDateTime, utcnow


def event_columns(event: Mapping[str, Any]) -> dict[str, Any]:
    """The indexed columns of a progress event: ``path``, ``status``, ``phase``, ``iteration``."""
    iteration = event.get("iteration")
    return {
        "path": str(event.get("path") or ""),
        "status": str(event.get("status") or ""),
        "phase": str(event.get("phase") or ""),
        "iteration": iteration if isinstance(iteration, int) and not isinstance(iteration, bool) else None,
    }


def _record(row: Run) -> RunRecord:
    return RunRecord(
        id=row.id,
        root_run_id=row.root_run_id,
        parent_run_id=row.parent_run_id,
        runnable=row.runnable,
        path=row.path,
        status=row.status,
        input=row.input,
        output=row.output,
        error=row.error,
        input_tokens=row.input_tokens,
        output_tokens=row.output_tokens,
        token_budget=row.token_budget,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        celery_task_id=row.celery_task_id,
        cancel_requested=row.cancel_requested,
    )


_CHECKPOINTS: Table = Checkpoint.__table__  # type: ignore[assignment]
_RUN_EVENTS: Table = RunEvent.__table__  # type: ignore[assignment]
_LOOP_STATE = select(
    _CHECKPOINTS.c.finished, _CHECKPOINTS.c.result, _CHECKPOINTS.c.iteration, _CHECKPOINTS.c.state
).where(_CHECKPOINTS.c.run_id == bindparam("run_id"), _CHECKPOINTS.c.path == bindparam("path"))


@functools.cache
def _finish_statements(dialect: str) -> tuple[Any, Any]:
    """The upsert of a finished loop and the insert of events, built once per dialect."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    upsert = insert(_CHECKPOINTS)
    upsert = upsert.on_conflict_do_update(
        index_elements=["run_id", "path"],
        set_={"finished": True, "result": upsert.excluded.result, "updated_at": upsert.excluded.updated_at},
    )
    return upsert, insert(_RUN_EVENTS)


def _lock_key(root_run_id: str) -> int:
    digest = hashlib.blake2b(root_run_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class SqlRunStore(SqlStoreBase):
    """The :class:`~orchestration.store.RunStore` on SQLite or PostgreSQL.

    Build it from an engine or a session factory of a migrated database
    (:func:`~orchestration.store.open_store` does both).
    """

    def create_run(
        self,
        *,
        run_id: str,
        runnable: str,
        input: JsonValue,
        root_run_id: str | None = None,
        parent_run_id: str | None = None,
        path: str = "",
        token_budget: int | None = None,
        celery_task_id: str | None = None,
    ) -> RunRecord:
        """Record a pending run; creating an id that exists returns the stored run unchanged."""
        values = {
            "id": run_id,
            "root_run_id": root_run_id or run_id,
            "parent_run_id": parent_run_id,
            "runnable": runnable,
            "path": path,
            "status": RunStatus.PENDING.value,
            "input": to_json_value(input, what=f"input of run {run_id!r}"),
            "token_budget": None if token_budget is None else check_count(token_budget, "token_budget"),
            "celery_task_id": celery_task_id,
            "created_at": utcnow(),
            "input_tokens": 0,
            "output_tokens": 0,
            "cancel_requested": False,
        }
        with self._sessions.begin() as session:
            session.execute(self._insert(Run).values(values).on_conflict_do_nothing(index_elements=["id"]))
            return _record(session.execute(select(Run).where(Run.id == run_id)).scalar_one())

    def mark_running(self, run_id: str) -> bool:
        """Mark the run running, keeping its first start time; ``False`` when it had already ended."""
        statement = (
            update(Run)
            .where(Run.id == run_id, Run.status.not_in(sorted(TERMINAL_STATUSES)))
            .values(
                status=RunStatus.RUNNING.value,
                started_at=func.coalesce(Run.started_at, literal(utcnow(), UtcDateTime())),
            )
            .returning(Run.id)
        )
        with self._sessions.begin() as session:
            if session.execute(statement).first() is not None:
                return True
        if self.get_run(run_id) is None:
            raise RunNotFoundError(run_id)
        return False

    def finish_run(
        self, run_id: str, *, status: str, output: JsonValue = None, error: JsonValue | BaseException = None
    ) -> None:
        """End the run with a terminal ``status``; ``error`` may be an exception or ``{"type", ...}``."""
        statement = (
            update(Run)
            .where(Run.id == run_id)
            .values(
                status=check_terminal_status(status),
                output=to_json_value(output, what=f"output of run {run_id!r}"),
                error=to_json_value(error_value(error), what=f"error of run {run_id!r}"),
                finished_at=utcnow(),
            )
            .returning(Run.id)
        )
        with self._sessions.begin() as session:
            if session.execute(statement).first() is None:
                raise RunNotFoundError(run_id)

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run, or ``None``."""
        with self._sessions() as session:
            row = session.get(Run, run_id)
            return None if row is None else _record(row)

    def list_runs(
        self,
        *,
        limit: int = 50,
        status: str | None = None,
        runnable: str | None = None,
        parent_run_id: str | None = None,
    ) -> list[RunRecord]:
        """The most recently created runs first, optionally filtered."""
        statement = (
            select(Run).order_by(Run.created_at.desc(), Run.id.desc()).limit(check_count(limit, "limit"))
        )
        if status is not None:
            statement = statement.where(Run.status == str(status))
        if runnable is not None:
            statement = statement.where(Run.runnable == str(runnable))
        if parent_run_id is not None:
            statement = statement.where(Run.parent_run_id == str(parent_run_id))
        with self._sessions() as session:
            return [_record(row) for row in session.execute(statement).scalars()]

    def summarize_children(self, parent_run_id: str) -> dict[str, Any]:
        """Counts per status and summed token usage of the runs whose parent is ``parent_run_id``."""
        statement = (
            select(Run.status, func.count(), func.sum(Run.input_tokens), func.sum(Run.output_tokens))
            .where(Run.parent_run_id == str(parent_run_id))
            .group_by(Run.status)
        )
        by_status: dict[str, int] = {}
        tokens_in = tokens_out = 0
        with self._sessions() as session:
            for status, count, total_in, total_out in session.execute(statement):
                by_status[str(status)] = int(count)
                tokens_in += int(total_in or 0)
                tokens_out += int(total_out or 0)
        return {
            "total": sum(by_status.values()),
            "by_status": by_status,
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
        }

    def append_event(self, root_run_id: str, event: Mapping[str, Any]) -> int:
        """Store a progress event under ``root_run_id``; returns its id.

        On PostgreSQL a transaction-scoped advisory lock per root run makes ids
        commit in order, so a reader polling with ``after_id`` never skips one.
        """
        if not isinstance(event, Mapping):
            raise TypeError(f"a progress event is a mapping, not {type(event).__name__}")
        payload = to_json_value(dict(event), what=f"progress event of run {root_run_id!r}")
        with self._sessions.begin() as session:
            if self._dialect == "postgresql":
                session.execute(select(func.pg_advisory_xact_lock(_lock_key(root_run_id))))
            statement = (
                self._insert(RunEvent)
                .values(run_id=root_run_id, payload=payload, created_at=utcnow(), **event_columns(payload))
                .returning(RunEvent.id)
            )
            return int(session.execute(statement).scalar_one())

    def append_events(self, root_run_id: str, events: Sequence[Mapping[str, Any]]) -> None:
        """Store several progress events under ``root_run_id`` in one transaction, in order."""
        if not events:
            return
        payloads = [to_json_value(dict(e), what=f"progress event of run {root_run_id!r}") for e in events]
        now = utcnow()
        rows = [
            {"run_id": root_run_id, "payload": payload, "created_at": now, **event_columns(payload)}
            for payload in payloads
        ]
        with self.engine.begin() as connection:
            if self._dialect == "postgresql":
                connection.execute(select(func.pg_advisory_xact_lock(_lock_key(root_run_id))))
            connection.execute(_finish_statements(self._dialect)[1], rows)

    def events(
        self, run_id: str, *, after_id: int = 0, limit: int | None = None
    ) -> list[tuple[int, dict[str, Any]]]:
        """The events of root run ``run_id`` with an id above ``after_id``, oldest first."""
        statement = (
            select(RunEvent.id, RunEvent.payload)
            .where(RunEvent.run_id == run_id, RunEvent.id > after_id)
            .order_by(RunEvent.id)
        )
        if limit is not None:
            statement = statement.limit(check_count(limit, "limit"))
        with self._sessions() as session:
            return [(int(event_id), payload) for event_id, payload in session.execute(statement)]

    def _run_and_root(self, run_id: str) -> Any:
        root = select(Run.root_run_id).where(Run.id == run_id).scalar_subquery()
        return or_(Run.id == run_id, Run.id == root)

    def request_cancel(self, run_id: str) -> None:
        """Ask the whole workflow of ``run_id`` to stop: flags the run and its root run."""
        statement = update(Run).where(self._run_and_root(run_id)).values(cancel_requested=True)
        with self._sessions.begin() as session:
            if session.execute(statement.returning(Run.id)).first() is None:
                raise RunNotFoundError(run_id)

    def is_cancel_requested(self, run_id: str) -> bool:
        """Whether cancellation was requested for the run or its root run (``False`` if unknown)."""
        statement = select(Run.id).where(self._run_and_root(run_id), Run.cancel_requested).limit(1)
        with self.engine.connect() as connection:
            return connection.execute(statement).first() is not None

    def add_usage(self, run_id: str, input_tokens: int, output_tokens: int) -> tuple[int, int]:
        """Atomically add token usage (``SET x = x + :n``); returns the new ``(input, output)`` totals."""
        statement = (
            update(Run)
            .where(Run.id == run_id)
            .values(
                input_tokens=Run.input_tokens + check_count(input_tokens, "input_tokens"),
                output_tokens=Run.output_tokens + check_count(output_tokens, "output_tokens"),
            )
            .returning(Run.input_tokens, Run.output_tokens)
        )
        with self._sessions.begin() as session:
            row = session.execute(statement).first()
        if row is None:
            raise RunNotFoundError(run_id)
        return int(row[0]), int(row[1])

    def save_checkpoint(self, run_id: str, path: str, iteration: int, state: JsonValue) -> None:
        """Replace the loop's checkpoint with ``(iteration, state)``: one row per (run, path)."""
        values = {
            "run_id": run_id,
            "path": path,
            "iteration": check_count(iteration, "iteration"),
            "state": to_json_value(state, what=f"checkpoint state of loop {path!r} in run {run_id!r}"),
            "updated_at": utcnow(),
        }
        insert = self._insert(Checkpoint).values(finished=False, result=None, **values)
        statement = insert.on_conflict_do_update(
            index_elements=["run_id", "path"],
            set_={
                "iteration": insert.excluded.iteration,
                "state": insert.excluded.state,
                "updated_at": insert.excluded.updated_at,
            },
        )
        with self._sessions.begin() as session:
            session.execute(statement)

    def load_checkpoint(self, run_id: str, path: str) -> tuple[int, JsonValue] | None:
        """The latest ``(iteration, state)`` of the loop at ``path``, or ``None``."""
        with self._sessions() as session:
            row = session.get(Checkpoint, (run_id, path))
            if row is None or row.iteration is None:
                return None
            return row.iteration, row.state

    def loop_state(self, run_id: str, path: str) -> tuple[bool, JsonValue, tuple[int, JsonValue] | None]:
        """``(finished, result, checkpoint)`` of the loop at ``path`` in one read.

        On the hot path of every task: SQLAlchemy Core on a plain connection, no ORM session.
        """
        with self.engine.connect() as connection:
            row = connection.execute(_LOOP_STATE, {"run_id": run_id, "path": path}).first()
        if row is None:
            return False, None, None
        finished, result, iteration, state = row
        checkpoint = None if iteration is None else (iteration, state)
        return bool(finished), result if finished else None, checkpoint

    def finish_loop(
        self, run_id: str, path: str, result: JsonValue, *, events: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        """:meth:`mark_loop_finished` and :meth:`append_events` (under ``run_id``) in one transaction.

        On the hot path of every task: prepared Core statements on a plain connection.
        """
        payloads = [to_json_value(dict(e), what=f"progress event of run {run_id!r}") for e in events]
        now = utcnow()
        row = {
            "run_id": run_id,
            "path": path,
            "iteration": None,
            "state": None,
            "finished": True,
            "result": to_json_value(result, what=f"result of loop {path!r} in run {run_id!r}"),
            "updated_at": now,
        }
        upsert, insert_events = _finish_statements(self._dialect)
        with self.engine.begin() as connection:
            if payloads and self._dialect == "postgresql":
                connection.execute(select(func.pg_advisory_xact_lock(_lock_key(run_id))))
            connection.execute(upsert, row)
            if payloads:
                rows = [
                    {"run_id": run_id, "payload": p, "created_at": now, **event_columns(p)} for p in payloads
                ]
                connection.execute(insert_events, rows)

    def mark_loop_finished(self, run_id: str, path: str, result: JsonValue) -> None:
        """Record that the loop at ``path`` finished with ``result`` (its checkpoint is kept)."""
        values = {
            "run_id": run_id,
            "path": path,
            "finished": True,
            "result": to_json_value(result, what=f"result of loop {path!r} in run {run_id!r}"),
            "updated_at": utcnow(),
        }
        insert = self._insert(Checkpoint).values(iteration=None, state=None, **values)
        statement = insert.on_conflict_do_update(
            index_elements=["run_id", "path"],
            set_={
                "finished": True,
                "result": insert.excluded.result,
                "updated_at": insert.excluded.updated_at,
            },
        )
        with self._sessions.begin() as session:
            session.execute(statement)

    def finished_result(self, run_id: str, path: str) -> tuple[bool, JsonValue]:
        """``(True, result)`` when the loop at ``path`` finished, else ``(False, None)``."""
        with self._sessions() as session:
            row = session.get(Checkpoint, (run_id, path))
            if row is None or not row.finished:
                return False, None
            return True, row.result

    def checkpoint_count(self) -> int:
        """How many loop checkpoints are kept (one row per run and path)."""
        with self._sessions() as session:
            return int(session.execute(select(func.count()).select_from(Checkpoint)).scalar_one())

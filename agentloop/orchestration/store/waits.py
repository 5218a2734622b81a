"""The questions a run asked people, in the run store's database (``human_waits``) or in memory.

One :class:`Wait` per (run, workflow path, question key): ``pending`` until it is
answered or expires, with the Celery message that re-sends the paused task. Settling
a wait is one conditional write (``pending`` to ``answered`` or ``expired``), so of
two resumes exactly one wins. A settled wait is *resumed* once its message has been
sent again (``resumed_at``); one settled and not resumed is the work a process left
when it died between the two (``orchestration/celery_adapter/pause.py`` sends it again).
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from agentloop.actions.human import Question
from agentloop.orchestration.store import InMemoryRunStore, RunStatus, RunStore, SqlRunStore, StoreRetry
from agentloop.orchestration.store.dialects import one_statement
from agentloop.orchestration.store.retry import retried
from agentloop.orchestration.store.tables import human_waits, runs, utcnow

PENDING, ANSWERED, EXPIRED = "pending", "answered", "expired"


@dataclass(frozen=True, kw_only=True, slots=True)
class Wait:
    """One question of a run: where it was asked, its state, its answer, how to resume."""

    run_id: str
    path: str
    question: Question
    status: str = PENDING
    answer: Any = None
    message: dict[str, Any] | None = None
    expires_at: datetime | None = None
    #: When it was answered or expired (``None`` while pending).
    answered_at: datetime | None = None
    #: Its message was sent again: the paused task continues.
    resumed: bool = False

    @property
    def key(self) -> str:
        return self.question.key

    def describe(self) -> dict[str, Any]:
        """The wait as JSON, for the CLI, the HTTP adapter and events."""
        expires = None if self.expires_at is None else self.expires_at.isoformat()
        return {
            "run_id": self.run_id,
            "path": self.path,
            "key": self.key,
            "status": self.status,
            "question": self.question.to_dict(),
            "answer_schema": self.question.answer_schema(),
            "expires_at": expires,
        }


class WaitStore(Protocol):
    """Where waits are kept; the run's ``waiting`` status is set beside them."""

    def get(self, run_id: str, path: str, key: str) -> Wait | None: ...

    def record(self, wait: Wait) -> bool:
        """Insert ``wait``; ``False`` when one with its run, path and key exists."""

    def waits(self, run_id: str, *, status: str | None = None) -> list[Wait]: ...

    def settle(self, run_id: str, path: str, key: str, *, status: str, answer: Any) -> bool:
        """Move a ``pending`` wait to ``status`` with ``answer``; ``False`` when it was not pending."""

    def mark_resumed(self, run_id: str, path: str, key: str) -> bool:
        """Note that a settled wait's message was sent again; ``False`` when it was noted already."""

    def unresumed(self, *, settled_before: datetime) -> list[Wait]:
        """The waits of every run settled before ``settled_before`` whose message was not sent again."""

    def mark_run_waiting(self, run_id: str) -> bool:
        """Mark a running run ``waiting``; ``False`` unless it runs and one of its waits is pending
        (an answer that came first has already sent the run on)."""


class SqlWaitStore:
    """Waits in the ``human_waits`` table of the run store's database."""

    def __init__(self, engine: Engine, *, retry: StoreRetry | None = None) -> None:
        self.engine = engine
        self.retry = retry or StoreRetry()  # tried again while the database is away, as the run store

    @retried
    def get(self, run_id: str, path: str, key: str) -> Wait | None:
        statement = select(human_waits).where(
            human_waits.c.run_id == run_id, human_waits.c.path == path, human_waits.c.key == key
        )
        with one_statement(self.engine) as connection:
            row = connection.execute(statement).mappings().first()
        return None if row is None else _wait(row)

    @retried
    def record(self, wait: Wait) -> bool:
        values = {
            "run_id": wait.run_id,
            "path": wait.path,
            "key": wait.key,
            "status": wait.status,
            "question": wait.question.to_dict(),
            "message": wait.message,
            "expires_at": wait.expires_at,
            "created_at": utcnow(),
        }
        try:
            with self.engine.begin() as connection:
                connection.execute(insert(human_waits).values(**values))
        except IntegrityError:
            return False
        return True

    @retried
    def waits(self, run_id: str, *, status: str | None = None) -> list[Wait]:
        statement = select(human_waits).where(human_waits.c.run_id == run_id)
        if status is not None:
            statement = statement.where(human_waits.c.status == status)
        with one_statement(self.engine) as connection:
            rows = connection.execute(statement.order_by(human_waits.c.created_at)).mappings().all()
        return [_wait(row) for row in rows]

    @retried
    def settle(self, run_id: str, path: str, key: str, *, status: str, answer: Any) -> bool:
        statement = (
            update(human_waits)
            .where(
                human_waits.c.run_id == run_id,
                human_waits.c.path == path,
                human_waits.c.key == key,
                human_waits.c.status == PENDING,
            )
            .values(status=status, answer=answer, answered_at=utcnow())
        )
        with self.engine.begin() as connection:
            return connection.execute(statement).rowcount == 1

    @retried
    def mark_resumed(self, run_id: str, path: str, key: str) -> bool:
        statement = (
            update(human_waits)
            .where(
                human_waits.c.run_id == run_id,
                human_waits.c.path == path,
                human_waits.c.key == key,
                human_waits.c.status != PENDING,
                human_waits.c.resumed_at.is_(None),
            )
            .values(resumed_at=utcnow())
        )
        with self.engine.begin() as connection:
            return connection.execute(statement).rowcount == 1

    @retried
    def unresumed(self, *, settled_before: datetime) -> list[Wait]:
        statement = select(human_waits).where(
            human_waits.c.status != PENDING,
            human_waits.c.resumed_at.is_(None),
            human_waits.c.answered_at < settled_before,
        )
        with one_statement(self.engine) as connection:
            rows = connection.execute(statement.order_by(human_waits.c.answered_at)).mappings().all()
        return [_wait(row) for row in rows]

    @retried
    def mark_run_waiting(self, run_id: str) -> bool:
        pending = select(human_waits.c.key).where(
            human_waits.c.run_id == run_id, human_waits.c.status == PENDING
        )
        statement = (
            update(runs)
            .where(runs.c.id == run_id, runs.c.status == RunStatus.RUNNING.value, pending.exists())
            .values(status=RunStatus.WAITING.value)
        )
        with self.engine.begin() as connection:
            return connection.execute(statement).rowcount == 1


def _wait(row: Any) -> Wait:
    return Wait(
        run_id=row["run_id"],
        path=row["path"],
        question=Question.from_dict(row["question"]),
        status=row["status"],
        answer=row["answer"],
        message=row["message"],
        expires_at=row["expires_at"],
        answered_at=row["answered_at"],
        resumed=row["resumed_at"] is not None,
    )


class InMemoryWaitStore:
    """The memory twin, beside an :class:`~agentloop.orchestration.store.InMemoryRunStore`."""

    def __init__(self, run_store: InMemoryRunStore) -> None:
        self.run_store = run_store
        self._waits: dict[tuple[str, str, str], Wait] = {}
        self._lock = threading.Lock()

    def get(self, run_id: str, path: str, key: str) -> Wait | None:
        with self._lock:
            return copy.deepcopy(self._waits.get((run_id, path, key)))

    def record(self, wait: Wait) -> bool:
        with self._lock:
            if (wait.run_id, wait.path, wait.key) in self._waits:
                return False
            self._waits[(wait.run_id, wait.path, wait.key)] = copy.deepcopy(wait)
            return True

    def waits(self, run_id: str, *, status: str | None = None) -> list[Wait]:
        with self._lock:
            found = [wait for (run, _, _), wait in self._waits.items() if run == run_id]
        return [copy.deepcopy(wait) for wait in found if status is None or wait.status == status]

    def settle(self, run_id: str, path: str, key: str, *, status: str, answer: Any) -> bool:
        with self._lock:
            wait = self._waits.get((run_id, path, key))
            if wait is None or wait.status != PENDING:
                return False
            settled = replace(wait, status=status, answer=copy.deepcopy(answer), answered_at=utcnow())
            self._waits[(run_id, path, key)] = settled
            return True

    def mark_resumed(self, run_id: str, path: str, key: str) -> bool:
        with self._lock:
            wait = self._waits.get((run_id, path, key))
            if wait is None or wait.status == PENDING or wait.resumed:
                return False
            self._waits[(run_id, path, key)] = replace(wait, resumed=True)
            return True

    def unresumed(self, *, settled_before: datetime) -> list[Wait]:
        with self._lock:
            found = [
                copy.deepcopy(wait)
                for wait in self._waits.values()
                if wait.status != PENDING
                and not wait.resumed
                and wait.answered_at is not None
                and wait.answered_at < settled_before
            ]
        return sorted(found, key=lambda wait: wait.answered_at or settled_before)

    def forget(self, run_ids: set[str], *, dry_run: bool = False) -> int:
        """Delete (or count) the questions of the runs ``run_ids`` (retention: ``retention.py``)."""
        with self._lock:
            keys = [key for key in self._waits if key[0] in run_ids]
            if not dry_run:
                for key in keys:
                    del self._waits[key]
        return len(keys)

    def mark_run_waiting(self, run_id: str) -> bool:
        with self._lock:  # held, so no answer settles the last pending wait in between
            if not any(w.status == PENDING for (run, _, _), w in self._waits.items() if run == run_id):
                return False
            return self.run_store.mark_waiting(run_id)


def wait_store_for(store: RunStore) -> WaitStore | None:
    """The wait store beside ``store``: the same database, or memory beside the memory twin
    (``None`` beside any other store: its runs cannot pause)."""
    if isinstance(store, SqlRunStore):
        return SqlWaitStore(store.engine, retry=store.retry)
    if isinstance(store, InMemoryRunStore):
        return InMemoryWaitStore(store)
    return None

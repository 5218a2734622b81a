"""A recorded run's entries (``actions/recording.py``), in the run store's database or in memory.

One row per place ``(run, path, iteration, kind, seq)``, under the ROOT run id: every
worker that runs a step of the run writes that step's entries, so the store is the
one medium the whole recording meets in. Writing a place again replaces it (a loop
resumed from a checkpoint records its iteration again; its last take produced the
result). Both stores have one: :attr:`SqlRunStore.recordings <agentloop.orchestration.store.SqlRunStore>`
and :attr:`InMemoryRunStore.recordings <agentloop.orchestration.store.InMemoryRunStore>`.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from sqlalchemy import Engine, delete, select

from agentloop.actions.recording import RecordedEntry
from agentloop.orchestration.store.checks import check_count
from agentloop.orchestration.store.dialects import insert, one_statement
from agentloop.orchestration.store.json_values import to_json_value
from agentloop.orchestration.store.retry import StoreRetry, retried
from agentloop.orchestration.store.tables import run_recordings, utcnow

__all__ = ["InMemoryRecordingStore", "RecordingStore", "SqlRecordingStore", "recording_store_for"]


@runtime_checkable
class RecordingStore(Protocol):
    """Where recorded entries are kept, by root run."""

    def add(self, run_id: str, entries: Sequence[RecordedEntry]) -> None:
        """Keep ``entries`` under the root run ``run_id``, each replacing the one at its place."""
        ...

    def entries(self, run_id: str) -> list[RecordedEntry]:
        """The run's entries, ordered by place (empty when it recorded nothing)."""
        ...

    def delete(self, run_id: str) -> None:
        """Forget the run's entries (an import replaces a recording whole)."""
        ...


def _checked(entry: RecordedEntry) -> RecordedEntry:
    check_count(entry.iteration, "iteration")
    check_count(entry.seq, "seq")
    return entry


class SqlRecordingStore:
    """Entries in the ``run_recordings`` table of the run store's database."""

    def __init__(self, engine: Engine, *, dialect: str, retry: StoreRetry | None = None) -> None:
        self.engine, self.dialect = engine, dialect
        self.retry = retry or StoreRetry()

    @retried
    def add(self, run_id: str, entries: Sequence[RecordedEntry]) -> None:
        rows = [
            {
                "run_id": run_id,
                "path": entry.path,
                "iteration": entry.iteration,
                "kind": entry.kind,
                "seq": entry.seq,
                "data": to_json_value(entry.to_dict()["data"], what="a recorded entry"),
                "recorded_at": utcnow(),
            }
            for entry in map(_checked, entries)
        ]
        if not rows:
            return
        statement = insert(run_recordings, self.dialect)
        statement = statement.on_conflict_do_update(
            index_elements=["run_id", "path", "iteration", "kind", "seq"],
            set_={"data": statement.excluded.data, "recorded_at": statement.excluded.recorded_at},
        )
        with self.engine.begin() as connection:
            for row in rows:
                connection.execute(statement, row)

    @retried
    def entries(self, run_id: str) -> list[RecordedEntry]:
        table = run_recordings.c
        statement = (
            select(table.path, table.iteration, table.kind, table.seq, table.data)
            .where(table.run_id == run_id)
            .order_by(table.path, table.iteration, table.kind, table.seq)
        )
        with one_statement(self.engine) as connection:
            rows = connection.execute(statement).mappings().all()
        return [
            RecordedEntry(
                path=row["path"],
                iteration=row["iteration"],
                kind=row["kind"],
                seq=row["seq"],
                data=row["data"] or {},
            )
            for row in rows
        ]

    @retried
    def delete(self, run_id: str) -> None:
        with self.engine.begin() as connection:
            connection.execute(delete(run_recordings).where(run_recordings.c.run_id == run_id))


class InMemoryRecordingStore:
    """The memory twin (values read back as JSON would return them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, dict[tuple[str, int, str, int], RecordedEntry]] = {}

    def add(self, run_id: str, entries: Sequence[RecordedEntry]) -> None:
        copies = [RecordedEntry.from_dict(copy.deepcopy(_checked(entry).to_dict())) for entry in entries]
        with self._lock:
            kept = self._entries.setdefault(run_id, {})
            for entry in copies:
                kept[entry.place] = entry

    def entries(self, run_id: str) -> list[RecordedEntry]:
        with self._lock:
            kept = dict(self._entries.get(run_id, {}))
        return [copy.deepcopy(kept[place]) for place in sorted(kept)]

    def delete(self, run_id: str) -> None:
        with self._lock:
            self._entries.pop(run_id, None)

    def forget(self, run_ids: Iterable[str], *, dry_run: bool = False) -> int:
        """The entries of the runs ``run_ids`` deleted (``dry_run``: counted); how many."""
        with self._lock:
            found = sum(len(self._entries.get(run_id, {})) for run_id in run_ids)
            if not dry_run:
                for run_id in run_ids:
                    self._entries.pop(run_id, None)
        return found


def recording_store_for(store: object) -> RecordingStore | None:
    """The recordings of run store ``store`` (``None`` for a store that keeps none)."""
    found = getattr(store, "recordings", None)
    return found if isinstance(found, RecordingStore) else None

"""Retention: delete the workflows that ended long ago, with everything recorded of them.

A *workflow* is a root run (``runs.id == runs.root_run_id``) and the runs under
it. One is deleted when its root run ended (a terminal status) before the
cut-off, no run of it is still open, and it is not a run of a batch that is
still open (the batch's summary counts it). With it go its progress events
(``run_events``, keyed by the root run), the checkpoints of its loops and the
questions it asked people (``human_waits``) and its recording (``run_recordings``, keyed by
the root run); its usage is columns of its run rows. A run still open is never deleted, whatever its age.

Each prune also deletes the concurrency keys' slot rows (``concurrency_slots``) that stopped
counting before its cut-off: a branch's slot given up when its task ended, a place in line given
up, a slot or a place whose lease ran out, a refused or cancelled run's row
(:meth:`~agentloop.orchestration.store.concurrency.SqlConcurrencySlots.forget`, in batches of
:data:`~agentloop.orchestration.store.concurrency.FORGET_BATCH` rows per transaction). The keys'
counts of refused and cancelled runs, and of their waits, are then of the rows kept.

A workflow may be pruned while a task of it still writes: a pack of a fail-fast
workflow whose run ended with a sibling's failure writes its branches'
checkpoints and events until it sees the end. Those writes are not refused (a
check per write would cost every task a round trip); each prune also deletes
the events, checkpoints, questions and recorded entries written before its cut-off whose run has
no row. A launch of a pruned run's id, re-sent, starts a new run: the store
knows nothing of the id any more, and refusing it would mean keeping every
pruned id for ever. A run id is an idempotency key while its run is kept.

:func:`prune_runs` works on both stores. On SQL it deletes
:data:`BATCH_SIZE` workflows per transaction, the oldest first, so a large
backlog never holds long locks; with ``dry_run`` it only counts. Beat runs it
hourly as ``agentloop.prune_runs`` when ``AGENTLOOP_RUN_RETENTION`` is set;
``agentloop runs prune --older-than 30d --dry-run`` shows what would go.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Select, Table, and_, delete, exists, func, select

from agentloop.orchestration.store.memory import InMemoryRunStore
from agentloop.orchestration.store.protocol import TERMINAL_STATUSES, RunStore
from agentloop.orchestration.store.sql import SqlRunStore
from agentloop.orchestration.store.tables import checkpoints, human_waits, run_events, run_recordings, runs
from agentloop.orchestration.store.waits import InMemoryWaitStore, WaitStore

__all__ = ["BATCH_SIZE", "Pruned", "prune_runs"]

#: How many workflows one transaction deletes.
BATCH_SIZE = 500
#: How many workflow ids a :class:`Pruned` lists (the oldest first).
SHOWN_IDS = 20


@dataclass(frozen=True, kw_only=True, slots=True)
class Pruned:
    """What a prune deleted, or with ``dry_run`` would delete: rows per table, and the first root run ids."""

    workflows: int
    runs: int
    events: int
    checkpoints: int
    waits: int
    dry_run: bool
    recordings: int = 0
    #: Concurrency slot rows that stopped counting before the cut-off (the module doc).
    slots: int = 0
    #: The root run ids of the first :data:`SHOWN_IDS` workflows, the oldest first.
    first_ids: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflows": self.workflows,
            "runs": self.runs,
            "events": self.events,
            "checkpoints": self.checkpoints,
            "waits": self.waits,
            "recordings": self.recordings,
            "slots": self.slots,
            "dry_run": self.dry_run,
            "first_ids": list(self.first_ids),
        }


def prune_runs(
    store: RunStore, *, before: datetime, dry_run: bool = False, waits: WaitStore | None = None
) -> Pruned:
    """Delete (or with ``dry_run`` count) the workflows whose root run ended before ``before``
    and have no run still open; ``waits`` is the memory twin's wait store, beside an
    :class:`InMemoryRunStore` (the SQL store's questions are in its own database).

    Raises ``TypeError`` for a store that is neither :class:`SqlRunStore` nor :class:`InMemoryRunStore`.
    """
    if before.tzinfo is None:
        raise ValueError(f"naive datetime {before!r} given where a timezone-aware one is required")
    if isinstance(store, SqlRunStore):
        pruned = _prune_sql(store, before, dry_run)
    elif isinstance(store, InMemoryRunStore):
        pruned = _prune_memory(store, waits, before, dry_run)
    else:
        raise TypeError(
            f"{type(store).__name__} cannot prune runs: only the SQL store and its memory twin can"
        )
    return replace(pruned, slots=store.concurrency.forget(before=before, dry_run=dry_run))


def _prunable(before: datetime) -> ColumnElement[bool]:
    """The root runs of the workflows that may go (see the module doc)."""
    terminal = sorted(TERMINAL_STATUSES)
    member, parent = runs.alias("member"), runs.alias("parent")
    return and_(
        runs.c.finished_at < before,
        runs.c.id == runs.c.root_run_id,
        runs.c.status.in_(terminal),
        ~exists().where(member.c.root_run_id == runs.c.id, member.c.status.not_in(terminal)),
        ~exists().where(parent.c.id == runs.c.parent_run_id, parent.c.status.not_in(terminal)),
    )


def _roots(before: datetime) -> Select[tuple[str]]:
    return select(runs.c.id).where(_prunable(before)).order_by(runs.c.finished_at, runs.c.id)


def _counts(connection: Connection, roots: Any) -> tuple[int, int, int, int, int]:
    """Rows of ``runs``, ``run_events``, ``checkpoints``, ``human_waits`` and ``run_recordings`` of
    the workflows ``roots``."""
    members = select(runs.c.id).where(runs.c.root_run_id.in_(roots))
    return (
        connection.execute(select(func.count()).select_from(members.subquery())).scalar_one(),
        _count(connection, run_events, run_events.c.run_id.in_(roots)),
        _count(connection, checkpoints, checkpoints.c.run_id.in_(members)),
        _count(connection, human_waits, human_waits.c.run_id.in_(members)),
        _count(connection, run_recordings, run_recordings.c.run_id.in_(roots)),
    )


def _count(connection: Connection, table: Table, where: ColumnElement[bool]) -> int:
    return int(connection.execute(select(func.count()).select_from(table).where(where)).scalar_one())


def _orphaned(before: datetime) -> tuple[tuple[Table, ColumnElement[bool]], ...]:
    """The rows of ``run_events``, ``checkpoints``, ``human_waits`` and ``run_recordings`` written
    before ``before``
    whose run has no row (a pruned workflow's pack that wrote on, see the module doc)."""
    return tuple(
        (table, and_(written < before, ~exists().where(runs.c.id == table.c.run_id)))
        for table, written in (
            (run_events, run_events.c.created_at),
            (checkpoints, checkpoints.c.updated_at),
            (human_waits, human_waits.c.created_at),
            (run_recordings, run_recordings.c.recorded_at),
        )
    )


def _orphans_sql(store: SqlRunStore, before: datetime, dry_run: bool) -> tuple[int, int, int, int, int]:
    """The orphaned rows before ``before`` deleted (``dry_run``: counted), one transaction."""
    with store.engine.begin() as connection:
        if dry_run:
            found = [_count(connection, table, where) for table, where in _orphaned(before)]
        else:
            found = [
                connection.execute(delete(table).where(where)).rowcount for table, where in _orphaned(before)
            ]
    events, kept_checkpoints, waits, recorded = found
    return 0, events, kept_checkpoints, waits, recorded


def _prune_sql(store: SqlRunStore, before: datetime, dry_run: bool) -> Pruned:
    orphans = store.retry.call(lambda: _orphans_sql(store, before, dry_run))
    if dry_run:
        counted = store.retry.call(lambda: _count_sql(store, before))
        counts = (counted.runs, counted.events, counted.checkpoints, counted.waits, counted.recordings)
        totals = [count + orphan for count, orphan in zip(counts, orphans, strict=True)]
        return Pruned(
            workflows=counted.workflows, **_named(tuple(totals)), dry_run=True, first_ids=counted.first_ids
        )
    totals, shown, workflows = list(orphans), list[str](), 0
    while roots_and_counts := store.retry.call(lambda: _delete_batch(store, before)):
        roots, counts = roots_and_counts
        totals = [total + count for total, count in zip(totals, counts, strict=True)]
        workflows += len(roots)
        shown += roots[: SHOWN_IDS - len(shown)]
    return Pruned(workflows=workflows, **_named(tuple(totals)), dry_run=False, first_ids=tuple(shown))


def _count_sql(store: SqlRunStore, before: datetime) -> Pruned:
    roots = select(runs.c.id).where(_prunable(before))
    with store.engine.connect() as connection:
        first = tuple(str(root) for root in connection.execute(_roots(before).limit(SHOWN_IDS)).scalars())
        workflows = connection.execute(select(func.count()).select_from(roots.subquery())).scalar_one()
        counts = _counts(connection, roots)
    return Pruned(workflows=workflows, **_named(counts), dry_run=True, first_ids=first)


def _delete_batch(
    store: SqlRunStore, before: datetime
) -> tuple[list[str], tuple[int, int, int, int, int]] | None:
    """One transaction: the oldest :data:`BATCH_SIZE` prunable workflows deleted (``None``: none left)."""
    with store.engine.begin() as connection:
        roots = [str(root) for root in connection.execute(_roots(before).limit(BATCH_SIZE)).scalars()]
        if not roots:
            return None
        members = select(runs.c.id).where(runs.c.root_run_id.in_(roots))
        waits = connection.execute(delete(human_waits).where(human_waits.c.run_id.in_(members))).rowcount
        loops = connection.execute(delete(checkpoints).where(checkpoints.c.run_id.in_(members))).rowcount
        events = connection.execute(delete(run_events).where(run_events.c.run_id.in_(roots))).rowcount
        recorded = connection.execute(
            delete(run_recordings).where(run_recordings.c.run_id.in_(roots))
        ).rowcount
        run_rows = connection.execute(delete(runs).where(runs.c.root_run_id.in_(roots))).rowcount
    return roots, (run_rows, events, loops, waits, recorded)


def _named(counts: tuple[int, ...]) -> dict[str, int]:
    run_rows, events, kept_checkpoints, waits, recorded = counts
    return {
        "runs": run_rows,
        "events": events,
        "checkpoints": kept_checkpoints,
        "waits": waits,
        "recordings": recorded,
    }


def _prune_memory(
    store: InMemoryRunStore, waits: WaitStore | None, before: datetime, dry_run: bool
) -> Pruned:
    roots, members, counts = store.prune_workflows(before=before, dry_run=dry_run)
    questions = waits.forget(members, dry_run=dry_run) if isinstance(waits, InMemoryWaitStore) else 0
    recorded = store.recordings.forget(roots, dry_run=dry_run)
    run_rows, events, kept_checkpoints = counts
    return Pruned(
        workflows=len(roots),
        runs=run_rows,
        events=events,
        checkpoints=kept_checkpoints,
        waits=questions,
        recordings=recorded,
        dry_run=dry_run,
        first_ids=tuple(roots[:SHOWN_IDS]),
    )

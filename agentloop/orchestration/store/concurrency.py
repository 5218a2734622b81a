"""Concurrency keys' slots, durable and shared by every worker: ``concurrency_slots`` (or memory).

One row per keyed root run, its place under its key: ``waiting`` in line, ``held`` (a slot),
``refused`` (its key was full and its runnable refuses), or ``evicted`` (cancelled to make room
for a newer run). :meth:`SqlConcurrencySlots.acquire` is one transaction: it counts the key's
slots and the waiters ahead of the run (and, with fair shares, the keys that have work), decides
(``fairness/shares.py``), and writes the run's new place. On PostgreSQL the transaction first
takes one advisory lock (fair shares read every key, so one lock for all); SQLite's file lock
serializes the writers, and a transaction that read before another committed is tried again
(``retry.py``).

Nothing needs releasing for a slot to free: a held slot counts only while its run has not ended
(the ``runs`` row says so) and its lease has not expired, and a place in line only until its
lease expires (each wait renews it). A worker that dies holding a slot leaves a run that its
redelivered message goes on with (the slot is still the run's), or that the delivery limit ends
(the slot frees with it); a run whose every message is gone gives its slot up when the lease ends.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from sqlalchemy import Connection, Engine, and_, case, func, or_, select, update

from agentloop.orchestration.fairness.rules import OnLimit
from agentloop.orchestration.fairness.shares import admits, effective_limit
from agentloop.orchestration.store.dialects import advisory_lock, insert, one_statement
from agentloop.orchestration.store.protocol import TERMINAL_STATUSES, RunStore
from agentloop.orchestration.store.retry import StoreRetry, retried
from agentloop.orchestration.store.tables import concurrency_slots, runs, utcnow

__all__ = [
    "Admission",
    "ConcurrencySlots",
    "InMemoryConcurrencySlots",
    "KeyCounts",
    "SqlConcurrencySlots",
]

#: How long a place in line counts without its run asking again (each wait renews it).
WAIT_LEASE_SECONDS = 120.0
_LIVE_STATES = ("waiting", "held")


@dataclass(frozen=True, kw_only=True, slots=True)
class Admission:
    """What :meth:`ConcurrencySlots.acquire` decided for one run."""

    #: The run holds a slot of its key (now, or already: a redelivery).
    admitted: bool
    #: The key's runs holding a slot (this one included when admitted).
    in_flight: int
    #: The key's runs waiting before this one.
    ahead: int = 0
    #: The bound applied: the key's limit or its fair share, whichever is lower (``None``: none).
    limit: int | None = None
    #: The run was refused (its runnable's ``on_limit="refuse"``, now or before).
    refused: bool = False
    #: The run of the key cancelled to make room for this one (``on_limit="cancel_oldest"``).
    evicted: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class KeyCounts:
    """One key's runs: holding a slot, waiting, refused, evicted, and the waits they made."""

    held: int = 0
    waiting: int = 0
    refused: int = 0
    evicted: int = 0
    waits: int = 0


@runtime_checkable
class ConcurrencySlots(Protocol):
    """Where keyed runs take their slots (both stores have one: ``store.concurrency``)."""

    def acquire(
        self,
        *,
        run_id: str,
        key: str,
        limit: int | None,
        on_limit: OnLimit = "wait",
        fair_slots: int | None = None,
        lease_seconds: float = 3600.0,
    ) -> Admission:
        """Take a slot of ``key`` for the root run ``run_id``, or say why not (see the module doc)."""
        ...

    def keys_of(self, run_ids: list[str]) -> dict[str, str]:
        """The key of each of ``run_ids`` that has one."""
        ...

    def counts(self) -> dict[str, KeyCounts]:
        """Every key's runs by place (held and waiting: only those whose run and lease go on) and
        the waits all its runs made."""
        ...


def _decide(
    held: int, ahead: int, active: int, *, limit: int | None, on_limit: OnLimit, fair_slots: int | None
) -> tuple[str, int | None]:
    """``("held" | "waiting" | "refused" | "evict", bound)`` for a run of a key with ``held``
    slots taken and ``ahead`` runs waiting before it, while ``active`` keys have work."""
    bound = effective_limit(limit, fair_slots, active)
    if admits(held=held, ahead=ahead, limit=bound):
        return "held", bound
    if on_limit == "refuse":
        return "refused", bound
    if on_limit == "cancel_oldest" and bound is not None and held >= bound:
        return "evict", bound
    return "waiting", bound


class SqlConcurrencySlots:
    """Slots in the ``concurrency_slots`` table of the run store's database."""

    def __init__(self, engine: Engine, *, dialect: str, retry: StoreRetry | None = None) -> None:
        self.engine, self.dialect = engine, dialect
        self.retry = retry or StoreRetry()

    @staticmethod
    def _held(now: datetime) -> object:
        """Held slots whose run has not ended and whose lease runs."""
        ended = select(runs.c.id).where(
            runs.c.id == concurrency_slots.c.run_id, runs.c.status.in_(sorted(TERMINAL_STATUSES))
        )
        return and_(
            concurrency_slots.c.state == "held", concurrency_slots.c.lease_until > now, ~ended.exists()
        )

    @retried
    def acquire(
        self,
        *,
        run_id: str,
        key: str,
        limit: int | None,
        on_limit: OnLimit = "wait",
        fair_slots: int | None = None,
        lease_seconds: float = 3600.0,
    ) -> Admission:
        slots = concurrency_slots.c
        with self.engine.begin() as connection:
            if self.dialect == "postgresql":
                connection.execute(advisory_lock("agentloop concurrency slots"))
            now = utcnow()
            own = connection.execute(
                select(slots.state, slots.queued_at, slots.key).where(slots.run_id == run_id)
            ).first()
            if own is None:
                connection.execute(
                    insert(concurrency_slots, self.dialect).values(
                        run_id=run_id,
                        key=key,
                        state="waiting",
                        queued_at=now,
                        lease_until=now + timedelta(seconds=WAIT_LEASE_SECONDS),
                        waits=0,
                    )
                )
                queued_at = now
            else:
                key, queued_at = own.key, own.queued_at  # a run keeps the key it first came with
                if own.state == "held":
                    held = self._count(connection, and_(slots.key == key, self._held(now)))  # type: ignore[arg-type]
                    return Admission(admitted=True, in_flight=held)
                if own.state in ("refused", "evicted"):
                    return Admission(admitted=False, in_flight=0, refused=True)
            held = self._count(connection, and_(slots.key == key, self._held(now)))  # type: ignore[arg-type]
            before = or_(
                slots.queued_at < queued_at, and_(slots.queued_at == queued_at, slots.run_id < run_id)
            )
            ahead = self._count(
                connection,
                and_(slots.key == key, slots.state == "waiting", slots.lease_until > now, before),
            )
            active = 1
            if fair_slots is not None:
                live = or_(self._held(now), and_(slots.state == "waiting", slots.lease_until > now))  # type: ignore[arg-type]
                active = connection.execute(
                    select(func.count(func.distinct(slots.key))).where(live)
                ).scalar_one()
                active = max(1, int(active))
            verdict, bound = _decide(
                held, ahead, active, limit=limit, on_limit=on_limit, fair_slots=fair_slots
            )
            evicted = None
            if verdict == "evict":
                evicted = connection.execute(
                    select(slots.run_id)
                    .where(slots.key == key, self._held(now))  # type: ignore[arg-type]
                    .order_by(slots.queued_at, slots.run_id)
                    .limit(1)
                ).scalar_one_or_none()
                if evicted is not None:
                    connection.execute(
                        update(concurrency_slots).where(slots.run_id == evicted).values(state="evicted")
                    )
                verdict, held = "held", held - (1 if evicted is not None else 0)
            mine = update(concurrency_slots).where(slots.run_id == run_id)
            if verdict == "held":
                lease = now + timedelta(seconds=lease_seconds)
                connection.execute(mine.values(state="held", lease_until=lease))
                return Admission(admitted=True, in_flight=held + 1, ahead=ahead, limit=bound, evicted=evicted)
            if verdict == "refused":
                connection.execute(mine.values(state="refused"))
                return Admission(admitted=False, in_flight=held, ahead=ahead, limit=bound, refused=True)
            lease = now + timedelta(seconds=WAIT_LEASE_SECONDS)
            connection.execute(mine.values(lease_until=lease, waits=slots.waits + 1))
            return Admission(admitted=False, in_flight=held, ahead=ahead, limit=bound)

    @staticmethod
    def _count(connection: Connection, where: object) -> int:
        found = connection.execute(select(func.count()).select_from(concurrency_slots).where(where))  # type: ignore[arg-type]
        return int(found.scalar_one())

    @retried
    def keys_of(self, run_ids: list[str]) -> dict[str, str]:
        if not run_ids:
            return {}
        slots = concurrency_slots.c
        with one_statement(self.engine) as connection:
            rows = connection.execute(select(slots.run_id, slots.key).where(slots.run_id.in_(run_ids)))
            return {str(row.run_id): str(row.key) for row in rows}

    @retried
    def counts(self) -> dict[str, KeyCounts]:
        slots = concurrency_slots.c
        now = utcnow()
        live = or_(
            slots.state.not_in(_LIVE_STATES),
            and_(slots.state == "waiting", slots.lease_until > now),
            self._held(now),  # type: ignore[arg-type]
        )
        counted = case((live, 1), else_=0)
        place = select(
            slots.key, slots.state, func.sum(counted).label("runs"), func.sum(slots.waits).label("waits")
        ).group_by(slots.key, slots.state)
        found: dict[str, dict[str, int]] = {}
        with one_statement(self.engine) as connection:
            for row in connection.execute(place):
                entry = found.setdefault(str(row.key), {"waits": 0})
                entry[str(row.state)] = int(row.runs or 0)
                entry["waits"] += int(row.waits or 0)
        return {key: KeyCounts(**values) for key, values in found.items()}


@dataclass(kw_only=True, slots=True)
class _Place:
    key: str
    state: str
    queued_at: float
    order: int
    lease_until: float
    waits: int = 0


class InMemoryConcurrencySlots:
    """The same slots in one process's memory (the memory run store's)."""

    def __init__(self, store: RunStore, *, clock: object = None) -> None:
        import time

        self.store = store
        self._clock = clock if callable(clock) else time.monotonic
        self._places: dict[str, _Place] = {}
        self._lock = threading.Lock()

    def _now(self) -> float:
        return float(self._clock())

    def _live(self, place: _Place, run_id: str, now: float) -> bool:
        if place.lease_until <= now:
            return False
        if place.state == "waiting":
            return True
        if place.state != "held":
            return False
        record = self.store.get_run(run_id)
        return record is None or not record.is_finished

    def acquire(
        self,
        *,
        run_id: str,
        key: str,
        limit: int | None,
        on_limit: OnLimit = "wait",
        fair_slots: int | None = None,
        lease_seconds: float = 3600.0,
    ) -> Admission:
        with self._lock:
            now = self._now()
            own = self._places.get(run_id)
            if own is None:
                own = self._places[run_id] = _Place(
                    key=key, state="waiting", queued_at=now, order=len(self._places),
                    lease_until=now + WAIT_LEASE_SECONDS,
                )  # fmt: skip
            live = {rid: p for rid, p in self._places.items() if self._live(p, rid, now)}
            held_ids = sorted(
                (rid for rid, p in live.items() if p.key == own.key and p.state == "held"),
                key=lambda rid: (live[rid].queued_at, live[rid].order),
            )
            if own.state == "held":
                return Admission(admitted=True, in_flight=len(held_ids))
            if own.state in ("refused", "evicted"):
                return Admission(admitted=False, in_flight=0, refused=True)
            mine = (own.queued_at, own.order)
            ahead = sum(
                1
                for p in live.values()
                if p.key == own.key and p.state == "waiting" and (p.queued_at, p.order) < mine
            )
            active = len({p.key for p in live.values()}) or 1
            verdict, bound = _decide(
                len(held_ids), ahead, active, limit=limit, on_limit=on_limit, fair_slots=fair_slots
            )
            held, evicted = len(held_ids), None
            if verdict == "evict" and held_ids:
                evicted = held_ids[0]
                self._places[evicted].state = "evicted"
                held -= 1
            if verdict in ("held", "evict"):
                own.state, own.lease_until = "held", now + lease_seconds
                return Admission(admitted=True, in_flight=held + 1, ahead=ahead, limit=bound, evicted=evicted)
            if verdict == "refused":
                own.state = "refused"
                return Admission(admitted=False, in_flight=held, ahead=ahead, limit=bound, refused=True)
            own.lease_until, own.waits = now + WAIT_LEASE_SECONDS, own.waits + 1
            return Admission(admitted=False, in_flight=held, ahead=ahead, limit=bound)

    def keys_of(self, run_ids: list[str]) -> dict[str, str]:
        with self._lock:
            return {rid: self._places[rid].key for rid in run_ids if rid in self._places}

    def counts(self) -> dict[str, KeyCounts]:
        with self._lock:
            now = self._now()
            found: dict[str, dict[str, int]] = {}
            for rid, place in self._places.items():
                entry = found.setdefault(place.key, {"waits": 0})
                entry["waits"] += place.waits
                live = place.state not in _LIVE_STATES or self._live(place, rid, now)
                entry[place.state] = entry.get(place.state, 0) + (1 if live else 0)
            return {key: KeyCounts(**values) for key, values in found.items()}

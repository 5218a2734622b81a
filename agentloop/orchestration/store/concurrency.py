"""Concurrency keys' slots, durable and shared by every worker: ``concurrency_slots`` (or memory).

One row per keyed root run, its place under its key: ``waiting`` in line, ``held`` (a slot),
``refused`` (its key was full and its runnable refuses), or ``evicted`` (cancelled to make room
for a newer run). :meth:`SqlConcurrencySlots.acquire` is one transaction: it counts the key's
slots and the waiters ahead of the run (and, with fair shares, the keys that have work), decides
(``fairness/shares.py``), and writes the run's new place. On PostgreSQL the transaction first
takes an advisory lock: its key's (without fair shares a key reads only its own rows), or one for
all keys (fair shares read every key); on SQLite it begins ``IMMEDIATE``, which serializes the
writers from their first read. Inside one process at most two threads asking for the same lock go
to the database (one inside, the next waiting its turn there, so the lock passes on without a
round trip); the others queue in the process (:class:`ProcessTurns`), holding no database
connection: a threads worker's fifty launches of one key waiting their turn held fifty of the
pool's fifteen connections, and every other run's store step (an interactive run's) queued behind
them.

A waiting run is *parked*: its row keeps its launch message (``message``), and whoever frees a
slot (a run of the key ends) calls :meth:`SqlConcurrencySlots.wake`, which picks the runs at the
head of each line that may now start (their key's limit and weighted share, less the slots held
and the wakes already on their way) and hands their messages back to be sent at once. A parked
run's own message also comes back after a slow backstop countdown, so a wake lost between the
store and the broker (the process died) only delays the run. Every copy of a launch message
carries a token (the wake header, ``celery_adapter/admission.py``): the copy that takes the slot
is its ``holder``, a later copy finding the slot held by another is a duplicate and runs nothing;
of the copies that find the run still waiting, only the backstop copy (``backstop``) sends the
next backstop, so each parked run has one message coming back, not more.

Nothing needs releasing for a slot to free: a held slot counts only while its run has not ended
(the ``runs`` row says so) and its lease has not expired, and a place in line only while its
run has not ended and its lease runs (each copy of its message that comes renews it; a batch's
runs, parked by :meth:`SqlConcurrencySlots.park` with no message each, keep theirs for
:data:`PARKED_SECONDS`). A worker that dies holding a slot leaves a run that its
redelivered message goes on with (the slot is still the run's), or that the delivery limit ends
(the slot frees with it); a run whose every message is gone gives its slot up when the lease ends.

A row's ``kind`` says what it is: ``run`` (a keyed root run's place, as above) or ``branch`` (a
branch task's place in its key's line of branch slots, ``celery_adapter/branch_slots.py``, named
by :func:`branch_holder` and given up by :meth:`SqlConcurrencySlots.release` when its task ends).
A key has a line of each kind, ``(kind, key)``: a line of branch slots is bounded by its branch
limit alone (never by fair shares, nor counted among the keys' runs), and a pack's row counts as
its branches (its ``weight``). A row given up (``done``) keeps, as its ``lease_until``, when it
stopped counting; :meth:`SqlConcurrencySlots.forget` deletes the rows that stopped counting long
ago (``store/retention.py``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from sqlalchemy import Connection, Engine, and_, case, delete, func, or_, select, update

from agentloop.orchestration.fairness.rules import OnLimit
from agentloop.orchestration.fairness.shares import admits, backstop_seconds, effective_limit, share_of
from agentloop.orchestration.store.dialects import advisory_lock, insert, one_statement
from agentloop.orchestration.store.protocol import TERMINAL_STATUSES, RunStore
from agentloop.orchestration.store.retry import StoreRetry, retried
from agentloop.orchestration.store.tables import concurrency_slots, runs, utcnow

__all__ = [
    "BRANCH_MARK",
    "FORGET_BATCH",
    "Admission",
    "ConcurrencySlots",
    "InMemoryConcurrencySlots",
    "KeyCounts",
    "ProcessTurns",
    "SlotKind",
    "SqlConcurrencySlots",
    "Wake",
    "branch_holder",
]

SlotKind = Literal["run", "branch"]
"""What a slot row is: a keyed root run's place, or a branch task's in its key's branch slots."""

#: How long a place in line counts past its backstop without its run asking again (each copy of
#: its message that comes renews it).
WAIT_LEASE_SECONDS = 120.0
#: How long a wake sent counts as on its way: its waiter is not woken again meanwhile, and takes
#: a free slot's place in the count of :meth:`ConcurrencySlots.wake`.
WAKE_SECONDS = 60.0
#: How late a backstop copy may be before another copy of the message sends a new one.
BACKSTOP_LATE_SECONDS = 60.0
#: How long a place in line parked by :meth:`ConcurrencySlots.park` lasts (a batch's run waits
#: its turn however long its batch's line is; its run ending gives the place up at once).
PARKED_SECONDS = 30 * 86400.0
#: The most waiters one :meth:`ConcurrencySlots.wake` sends.
WAKE_BATCH = 200
_LIVE_STATES = ("waiting", "held")
T = TypeVar("T")
#: How many rows one transaction of :meth:`ConcurrencySlots.forget` deletes.
FORGET_BATCH = 1000
#: What joins a run id to a branch's path in the name of a branch's slot
#: (``celery_adapter/branch_slots.py``): a unit separator, which no run id of a sane deployment
#: holds, so a branch's slot is never named as a run's.
BRANCH_MARK = "\x1f"
_NAME_CHARS = 255  # the width of the ``run_id`` column


def branch_holder(run_id: str, path: str) -> str:
    """The name of the slot of the branch at ``path`` of run ``run_id``."""
    whole = f"{run_id}{BRANCH_MARK}{path}"
    if len(whole) <= _NAME_CHARS:
        return whole
    return f"{run_id[:150]}{BRANCH_MARK}{hashlib.sha256(whole.encode()).hexdigest()}"


#: How many threads of a process go to the database for one lock of the slots at once: the one
#: holding it and the next, already waiting there (the module doc).
AT_THE_DATABASE = 2


class ProcessTurns:
    """For each name, at most ``width`` threads of this process at once in the ``with`` block of
    :meth:`held`; the others wait in the process. A name's semaphore is kept only while a thread
    is inside or waiting (a deployment's thousands of keys leave nothing behind)."""

    def __init__(self, width: int = AT_THE_DATABASE) -> None:
        self.width = width
        self._guard = threading.Lock()
        self._names: dict[Hashable, tuple[threading.Semaphore, int]] = {}

    @contextmanager
    def held(self, name: Hashable) -> Iterator[None]:
        """Enter ``name``'s block once fewer than ``width`` threads of this process are in it."""
        with self._guard:
            turns, users = self._names.get(name) or (threading.Semaphore(self.width), 0)
            self._names[name] = (turns, users + 1)
        try:
            with turns:
                yield
        finally:
            with self._guard:
                turns, users = self._names[name]
                if users == 1:
                    del self._names[name]
                else:
                    self._names[name] = (turns, users - 1)

    def __len__(self) -> int:
        """How many names have a thread inside or waiting."""
        with self._guard:
            return len(self._names)


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
    #: Another copy of the run's message holds its slot: this copy runs nothing.
    duplicate: bool = False
    #: The run waits and this copy sends its next backstop copy (:meth:`ConcurrencySlots.parked`).
    carrier: bool = False


@dataclass(frozen=True, slots=True)
class Wake:
    """A parked run (or branch) to send now: its key and the message it parked with."""

    run_id: str
    key: str
    message: dict[str, Any]
    kind: SlotKind = "run"


@dataclass(frozen=True, kw_only=True, slots=True)
class KeyCounts:
    """One key's runs: holding a slot, waiting, refused, evicted, and the waits they made; and its
    branches holding a branch slot and waiting for one (a pack's row counted as its branches)."""

    held: int = 0
    waiting: int = 0
    refused: int = 0
    evicted: int = 0
    waits: int = 0
    branches_held: int = 0
    branches_waiting: int = 0


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
        weight: int = 1,
        copy: str | None = None,
        message: Mapping[str, Any] | None = None,
        kind: SlotKind = "run",
    ) -> Admission:
        """Take a slot of ``key`` for the root run ``run_id``, or say why not (see the module doc).

        ``weight`` is the key's weight in the fair share, ``copy`` the token of the message copy
        asking (``None``: a message no wake sent), ``message`` the launch message a waiting run
        parks with. With ``kind="branch"``, ``run_id`` names a branch's slot (:func:`branch_holder`)
        in ``key``'s line of branch slots, ``limit`` is the branch limit and ``weight`` the
        branches the row stands for (a pack's)."""
        ...

    def park(
        self, *, key: str, waiters: list[tuple[str, Mapping[str, Any]]], limit: int | None, weight: int = 1
    ) -> None:
        """Put ``waiters`` (run ids and their launch messages: a batch's runs) in ``key``'s line
        at once, parked until a wake sends them; a run already in line keeps its place. Their
        place lasts :data:`PARKED_SECONDS` (no message of theirs comes back to renew it)."""
        ...

    def parked(self, run_id: str, *, backstop: str, seconds: float) -> None:
        """Note the backstop copy of a waiting run's message: ``backstop`` its token, due in ``seconds``."""
        ...

    def wake(
        self, *, fair_slots: int | None = None, keys: list[str] | None = None, kind: SlotKind = "run"
    ) -> list[Wake]:
        """The parked runs that may start now (at most :data:`WAKE_BATCH`), marked woken: the
        caller sends their messages. ``keys``: only those keys' lines of ``kind`` (without fair
        shares, a slot freed by a key is only that key's); without ``keys``, every line of both
        kinds (a line of branch slots is never in the fair shares)."""
        ...

    def release(self, run_id: str, *, waiting: bool = False) -> None:
        """Give up the slot ``run_id`` holds (a branch's, whose task ended), or with ``waiting`` its
        place in line only (its run ended while it waited; a slot held by another copy of its
        message stays that copy's): it counts no more. A
        later copy of its message finds it ``done``: another copy's (a wake's and a backstop's both
        came) is a duplicate and runs nothing; the holder's own (a retry, a resumption) asks anew."""
        ...

    def keys_of(self, run_ids: list[str]) -> dict[str, str]:
        """The key of each of ``run_ids`` that has one."""
        ...

    def counts(self) -> dict[str, KeyCounts]:
        """Every key's runs by place (held and waiting: only those whose run and lease go on), the
        waits all its runs made, and its branches holding and waiting for a branch slot."""
        ...

    def forget(self, *, before: datetime, dry_run: bool = False) -> int:
        """Delete (``dry_run``: count) the rows that stopped counting before ``before``: given up
        (``done``), or whose lease ended, then (:data:`FORGET_BATCH` per transaction)."""
        ...


def _decide(
    held: int, ahead: int, *, limit: int | None, share: int | None, on_limit: OnLimit
) -> tuple[str, int | None]:
    """``("held" | "waiting" | "refused" | "evict", bound)`` for a run of a key with ``held``
    slots taken and ``ahead`` runs waiting before it, under its limit and fair ``share``."""
    bound = effective_limit(limit, share)
    if admits(held=held, ahead=ahead, limit=bound):
        return "held", bound
    if on_limit == "refuse":
        return "refused", bound
    if on_limit == "cancel_oldest" and bound is not None and held >= bound:
        return "evict", bound
    return "waiting", bound


def _carries(copy: str | None, backstop: str | None, due: datetime | None, now: datetime) -> bool:
    """Whether a copy (token ``copy``) of a waiting run's message sends its next backstop: the
    run has none yet, this copy is it, or it is long overdue (lost)."""
    if backstop is None or backstop == copy:
        return True
    return due is None or due + timedelta(seconds=BACKSTOP_LATE_SECONDS) < now


def _free(bound: int | None, held: int) -> int:
    """The room a key's line has: its bound less its held slots. Its first waiters that fit are
    woken, less those whose wake is already on its way: a woken copy behind a waiter that parked
    again would itself park again (the one ahead takes the room), so the room goes to the head."""
    return WAKE_BATCH if bound is None else bound - held


def _share(kind: str, key: str, fair_slots: int | None, weights: Mapping[str, int]) -> int | None:
    """``key``'s fair share (none for a line of branch slots: only its branch limit bounds it)."""
    return None if kind == "branch" else share_of(key, fair_slots, weights)


def _within(rows: Sequence[T], free: int, size: Callable[[T], int]) -> list[T]:
    """The first of ``rows`` whose sizes sum to at most ``free`` (a line's order kept: the first
    that does not fit stops it)."""
    taken, room = [], free
    for row in rows:
        if size(row) > room:
            break
        taken.append(row)
        room -= size(row)
    return taken


def _kind(value: object) -> SlotKind:
    return "branch" if value == "branch" else "run"


def _message_text(message: Mapping[str, Any] | None) -> str | None:
    return None if message is None else json.dumps(message, separators=(",", ":"), default=str)


class SqlConcurrencySlots:
    """Slots in the ``concurrency_slots`` table of the run store's database."""

    def __init__(self, engine: Engine, *, dialect: str, retry: StoreRetry | None = None) -> None:
        self.engine, self.dialect = engine, dialect
        self.retry = retry or StoreRetry()
        self.turns = ProcessTurns()

    @contextmanager
    def _serialized(self, line: tuple[str, str] | None) -> Iterator[Connection]:
        """A transaction that runs alone among the slots' writers of ``line`` (its kind and key;
        ``None``: of every key's runs, as fair shares read them all): on PostgreSQL under an
        advisory lock (one per line, so one key's thousands of waiters never hold up another key's
        launch), on SQLite from ``BEGIN IMMEDIATE`` (its reads would otherwise run before its
        transaction begins, each seeing whatever was committed then). A thread takes a connection
        only once fewer than :data:`AT_THE_DATABASE` threads of this process ask for the same line
        (:class:`ProcessTurns`)."""
        with self.turns.held(line), self.engine.begin() as connection:
            if self.dialect == "postgresql":
                name = "agentloop concurrency slots"
                if line is not None:
                    kind, key = line
                    name = f"{name} of {key}" if kind == "run" else f"agentloop branch slots of {key}"
                connection.execute(advisory_lock(name))
            elif self.dialect == "sqlite":
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            yield connection

    @staticmethod
    def _line(kind: str, key: str) -> Any:
        """The rows of ``key``'s line of ``kind``."""
        slots = concurrency_slots.c
        return and_(slots.kind == kind, slots.key == key)

    @classmethod
    def _held(cls, now: datetime) -> Any:
        """Held slots whose run has not ended and whose lease runs."""
        slots = concurrency_slots.c
        return and_(slots.state == "held", slots.lease_until > now, ~cls._ended())

    @staticmethod
    def _ended() -> Any:
        """The slot's run has ended."""
        return (
            select(runs.c.id)
            .where(runs.c.id == concurrency_slots.c.run_id, runs.c.status.in_(sorted(TERMINAL_STATUSES)))
            .exists()
        )

    @classmethod
    def _waiting(cls, now: datetime) -> Any:
        """Places in line whose lease runs and whose run has not ended (a batch's run cancelled
        while it waited holds up nobody)."""
        slots = concurrency_slots.c
        return and_(slots.state == "waiting", slots.lease_until > now, ~cls._ended())

    def _weights(self, connection: Connection, now: datetime) -> dict[str, int]:
        """The weight of every key with work (a run holding a slot or waiting)."""
        slots = concurrency_slots.c
        live = and_(slots.kind == "run", or_(self._held(now), self._waiting(now)))
        rows = connection.execute(select(slots.key, func.max(slots.weight)).where(live).group_by(slots.key))
        return {str(key): int(weight or 1) for key, weight in rows}

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
        weight: int = 1,
        copy: str | None = None,
        message: Mapping[str, Any] | None = None,
        kind: SlotKind = "run",
    ) -> Admission:
        slots = concurrency_slots.c
        fair = fair_slots if kind == "run" else None  # a line of branch slots: its limit alone
        with self._serialized(None if fair else (kind, key)) as connection:
            now = utcnow()
            own = connection.execute(
                select(
                    slots.state,
                    slots.queued_at,
                    slots.kind,
                    slots.key,
                    slots.holder,
                    slots.backstop,
                    slots.backstop_due,
                    slots.weight,
                ).where(slots.run_id == run_id)
            ).first()
            if own is None:
                connection.execute(
                    insert(concurrency_slots, self.dialect).values(
                        run_id=run_id,
                        kind=kind,
                        key=key,
                        state="waiting",
                        queued_at=now,
                        lease_until=now + timedelta(seconds=WAIT_LEASE_SECONDS),
                        waits=0,
                        weight=max(1, weight),
                        bound=limit,
                        message=_message_text(message),
                    )
                )
                queued_at = now
            else:  # a run keeps the key it first came with
                kind, key, queued_at = own.kind, own.key, own.queued_at
            # a line of branch slots counts a pack's row as its branches (its weight), a key's a run as one
            branches = kind == "branch"
            line = self._line(kind, key)
            if own is not None:
                if own.state == "held":
                    held = self._count(connection, and_(line, self._held(now)), branches)
                    duplicate = copy is not None and own.holder != copy
                    return Admission(admitted=not duplicate, in_flight=held, duplicate=duplicate)
                if own.state in ("refused", "evicted"):
                    return Admission(admitted=False, in_flight=0, refused=True)
                if own.state == "done":  # a branch's slot given up: its own copy again takes another
                    if own.holder != copy:
                        return Admission(admitted=False, in_flight=0, duplicate=True)
                    again = update(concurrency_slots).where(slots.run_id == run_id).values(state="waiting")
                    connection.execute(again)
            size = max(1, weight if own is None else int(own.weight or 1)) if branches else 1
            held = self._count(connection, and_(line, self._held(now)), branches)
            before = or_(
                slots.queued_at < queued_at, and_(slots.queued_at == queued_at, slots.run_id < run_id)
            )
            ahead = self._count(connection, and_(line, self._waiting(now), before), branches)
            share = _share(kind, key, fair, self._weights(connection, now)) if fair else None
            verdict, bound = _decide(held, ahead + size - 1, limit=limit, share=share, on_limit=on_limit)
            evicted = None
            if verdict == "evict":
                evicted = connection.execute(
                    select(slots.run_id)
                    .where(line, self._held(now))
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
                connection.execute(mine.values(state="held", lease_until=lease, holder=copy, message=None))
                return Admission(
                    admitted=True, in_flight=held + size, ahead=ahead, limit=bound, evicted=evicted
                )
            if verdict == "refused":
                connection.execute(mine.values(state="refused", message=None))
                return Admission(admitted=False, in_flight=held, ahead=ahead, limit=bound, refused=True)
            wait = backstop_seconds(ahead, bound) + WAIT_LEASE_SECONDS
            carrier = own is None or _carries(copy, own.backstop, own.backstop_due, now)
            parked = {"message": _message_text(message)} if own is not None and message is not None else {}
            lease = now + timedelta(seconds=wait)
            # a woken copy that parks again is no longer on its way: the next freed slot wakes it
            connection.execute(mine.values(lease_until=lease, waits=slots.waits + 1, woken_at=None, **parked))
            return Admission(admitted=False, in_flight=held, ahead=ahead, limit=bound, carrier=carrier)

    @retried
    def park(
        self, *, key: str, waiters: list[tuple[str, Mapping[str, Any]]], limit: int | None, weight: int = 1
    ) -> None:
        if not waiters:
            return
        now = utcnow()
        lease = now + timedelta(seconds=PARKED_SECONDS)
        rows = [
            {
                "run_id": run_id, "kind": "run", "key": key, "state": "waiting", "queued_at": now,
                "lease_until": lease, "waits": 0, "weight": max(1, weight), "bound": limit,
                "message": _message_text(message),
            }
            for run_id, message in waiters
        ]  # fmt: skip
        statement = insert(concurrency_slots, self.dialect).on_conflict_do_nothing(index_elements=["run_id"])
        with self._serialized(("run", key)) as connection:
            connection.execute(statement, rows)

    @retried
    def parked(self, run_id: str, *, backstop: str, seconds: float) -> None:
        slots = concurrency_slots.c
        due = utcnow() + timedelta(seconds=seconds)
        with one_statement(self.engine) as connection, connection.begin():
            connection.execute(
                update(concurrency_slots)
                .where(slots.run_id == run_id, slots.state == "waiting")
                .values(backstop=backstop, backstop_due=due)
            )

    def wake(
        self, *, fair_slots: int | None = None, keys: list[str] | None = None, kind: SlotKind = "run"
    ) -> list[Wake]:
        if fair_slots is not None and kind == "run":
            return self._wake(None, fair_slots=fair_slots)
        if keys is None:  # each line under its own lock, as its launches take it
            slots = concurrency_slots.c
            with one_statement(self.engine) as connection:
                found = select(slots.kind, slots.key).where(self._waiting(utcnow())).distinct()
                lines = sorted((str(kind), str(key)) for kind, key in connection.execute(found))
        else:
            lines = [(kind, key) for key in keys]
        return [wake for line in lines for wake in self._wake(line)]

    @retried
    def _wake(self, only: tuple[str, str] | None, *, fair_slots: int | None = None) -> list[Wake]:
        """:meth:`wake` of the line ``only`` (kind, key) under its lock, or of every line under
        fair shares (``None``)."""
        slots = concurrency_slots.c
        with self._serialized(only) as connection:
            now = utcnow()
            waiting = and_(self._waiting(now), slots.message.is_not(None))
            found = select(slots.kind, slots.key).where(waiting).distinct()
            if only is not None:
                found = found.where(self._line(*only))
            lines = sorted((str(kind), str(key)) for kind, key in connection.execute(found))
            if not lines:
                return []
            weights = self._weights(connection, now) if fair_slots is not None else {}
            in_line = slots.key.in_(sorted({key for _, key in lines}))
            held = self._by_line(connection, and_(in_line, self._held(now)))
            recent = now - timedelta(seconds=WAKE_SECONDS)
            woken: list[Wake] = []
            for kind, name in lines:
                head = and_(self._line(kind, name), waiting)
                limit = connection.execute(
                    select(slots.bound).where(head).order_by(slots.queued_at, slots.run_id).limit(1)
                ).scalar_one_or_none()
                bound = effective_limit(limit, _share(kind, name, fair_slots, weights))
                line = (kind, name)
                free = min(_free(bound, held.get(line, 0)), WAKE_BATCH - len(woken))
                if free <= 0:
                    continue
                on_its_way = and_(slots.woken_at.is_not(None), slots.woken_at > recent)
                rows = connection.execute(
                    select(slots.run_id, slots.message, slots.weight, on_its_way.label("on_its_way"))
                    .where(head)
                    .order_by(slots.queued_at, slots.run_id)
                    .limit(free)
                ).all()
                if kind == "branch":  # a pack waits for room for all its branches
                    rows = _within(rows, free, lambda row: int(row.weight or 1))
                rows = [row for row in rows if not row.on_its_way]
                if rows:
                    ids = [row.run_id for row in rows]
                    connection.execute(
                        update(concurrency_slots).where(slots.run_id.in_(ids)).values(woken_at=now)
                    )
                    woken += [
                        Wake(str(row.run_id), name, json.loads(row.message), _kind(kind)) for row in rows
                    ]
            return woken

    @staticmethod
    def _count(connection: Connection, where: Any, weighted: bool = False) -> int:
        """The rows ``where`` says (``weighted``: their weights summed, a line of branch slots')."""
        what = func.coalesce(func.sum(concurrency_slots.c.weight), 0) if weighted else func.count()
        found = connection.execute(select(what).select_from(concurrency_slots).where(where))
        return int(found.scalar_one())

    @staticmethod
    def _by_line(connection: Connection, where: Any) -> dict[tuple[str, str], int]:
        """:meth:`_count` of each line's rows, by kind and key (weighted in a line of branch slots)."""
        slots = concurrency_slots.c
        query = (
            select(slots.kind, slots.key, func.count(), func.sum(slots.weight))
            .where(where)
            .group_by(slots.kind, slots.key)
        )
        return {
            (str(kind), str(key)): int((total or 0) if kind == "branch" else count)
            for kind, key, count, total in connection.execute(query)
        }

    @retried
    def release(self, run_id: str, *, waiting: bool = False) -> None:
        slots = concurrency_slots.c
        with one_statement(self.engine) as connection, connection.begin():
            connection.execute(
                update(concurrency_slots)
                .where(slots.run_id == run_id, slots.state == ("waiting" if waiting else "held"))
                .values(state="done", message=None, lease_until=utcnow())  # when it stopped counting
            )

    @retried
    def keys_of(self, run_ids: list[str]) -> dict[str, str]:
        if not run_ids:
            return {}
        slots = concurrency_slots.c
        with one_statement(self.engine) as connection:
            rows = connection.execute(
                select(slots.run_id, slots.key).where(slots.run_id.in_(run_ids), slots.kind == "run")
            )
            return {str(row.run_id): str(row.key) for row in rows}

    @retried
    def counts(self) -> dict[str, KeyCounts]:
        slots = concurrency_slots.c
        now = utcnow()
        live = or_(slots.state.not_in(_LIVE_STATES), self._waiting(now), self._held(now))
        counted = case((live, 1), else_=0)
        place = select(
            slots.kind,
            slots.key,
            slots.state,
            func.sum(counted).label("runs"),
            func.sum(counted * slots.weight).label("weighted"),
            func.sum(slots.waits).label("waits"),
        ).group_by(slots.kind, slots.key, slots.state)
        found: dict[str, dict[str, int]] = {}
        with one_statement(self.engine) as connection:
            for row in connection.execute(place):
                _tally(found, str(row.kind), str(row.key), str(row.state), int(row.runs or 0),
                       int(row.weighted or 0), int(row.waits or 0))  # fmt: skip
        return {key: KeyCounts(**values) for key, values in found.items()}

    def forget(self, *, before: datetime, dry_run: bool = False) -> int:
        old = concurrency_slots.c.lease_until < before
        if dry_run:
            with one_statement(self.engine) as connection:
                return self._count(connection, old)
        forgotten = 0
        while True:
            deleted = self.retry.call(lambda: self._forget_batch(old))
            forgotten += deleted
            if deleted < FORGET_BATCH:
                return forgotten

    def _forget_batch(self, old: Any) -> int:
        """One transaction: at most :data:`FORGET_BATCH` of the rows ``old`` deleted."""
        slots = concurrency_slots.c
        batch = select(slots.run_id).where(old).order_by(slots.lease_until).limit(FORGET_BATCH)
        with self.engine.begin() as connection:
            ids = list(connection.execute(batch).scalars())
            if ids:
                connection.execute(delete(concurrency_slots).where(slots.run_id.in_(ids)))
            return len(ids)


def _tally(
    found: dict[str, dict[str, int]], kind: str, key: str, state: str, rows: int, weighted: int, waits: int
) -> None:
    """Add to ``found`` (each key's :class:`KeyCounts` fields) a line's ``rows`` in ``state``
    (``weighted``: their weights summed, a line of branch slots' count) and their ``waits``."""
    entry = found.setdefault(key, {"waits": 0})
    if kind == "branch":
        if state in _LIVE_STATES:
            field = "branches_held" if state == "held" else "branches_waiting"
            entry[field] = entry.get(field, 0) + weighted
        return
    if state in ("held", "waiting", "refused", "evicted"):
        entry[state] = entry.get(state, 0) + rows
    entry["waits"] += waits


@dataclass(kw_only=True, slots=True)
class _Place:
    kind: SlotKind
    key: str
    state: str
    queued_at: float
    order: int
    lease_until: float
    waits: int = 0
    weight: int = 1
    bound: int | None = None
    message: dict[str, Any] | None = None
    woken_at: float | None = None
    holder: str | None = None
    backstop: str | None = None
    backstop_due: float | None = None


def _size(place: _Place) -> int:
    """The slots ``place`` takes: its weight in a line of branch slots (a pack's branches), else one."""
    return max(1, place.weight) if place.kind == "branch" else 1


class InMemoryConcurrencySlots:
    """The same slots in one process's memory (the memory run store's)."""

    def __init__(self, store: RunStore, *, clock: Callable[[], float] | None = None) -> None:
        import time

        self.store = store
        self._clock = clock if clock is not None else time.monotonic
        self._places: dict[str, _Place] = {}
        self._lock = threading.Lock()

    def _now(self) -> float:
        return float(self._clock())

    def _live(self, place: _Place, run_id: str, now: float) -> bool:
        if place.lease_until <= now:
            return False
        if place.state not in _LIVE_STATES:
            return False
        record = self.store.get_run(run_id)
        return record is None or not record.is_finished

    def _lines(self, now: float) -> dict[str, _Place]:
        return {rid: p for rid, p in self._places.items() if self._live(p, rid, now)}

    @staticmethod
    def _weights(live: Mapping[str, _Place]) -> dict[str, int]:
        weights: dict[str, int] = {}
        for place in live.values():
            if place.kind == "branch":
                continue
            weights[place.key] = max(weights.get(place.key, 1), place.weight)
        return weights

    def acquire(
        self,
        *,
        run_id: str,
        key: str,
        limit: int | None,
        on_limit: OnLimit = "wait",
        fair_slots: int | None = None,
        lease_seconds: float = 3600.0,
        weight: int = 1,
        copy: str | None = None,
        message: Mapping[str, Any] | None = None,
        kind: SlotKind = "run",
    ) -> Admission:
        with self._lock:
            now = self._now()
            own = self._places.get(run_id)
            new = own is None
            if own is None:
                own = self._places[run_id] = _Place(
                    kind=kind, key=key, state="waiting", queued_at=now, order=len(self._places),
                    lease_until=now + WAIT_LEASE_SECONDS, weight=max(1, weight), bound=limit,
                )  # fmt: skip
            if message is not None and own.state == "waiting":
                own.message = dict(message)
            live = self._lines(now)
            line = (own.kind, own.key)
            held_ids = sorted(
                (rid for rid, p in live.items() if (p.kind, p.key) == line and p.state == "held"),
                key=lambda rid: (live[rid].queued_at, live[rid].order),
            )
            size = _size(own)  # a pack's row counts as its branches (its weight)
            if own.state == "held":
                duplicate = copy is not None and own.holder != copy
                in_flight = sum(_size(live[rid]) for rid in held_ids)
                return Admission(admitted=not duplicate, in_flight=in_flight, duplicate=duplicate)
            if own.state in ("refused", "evicted"):
                return Admission(admitted=False, in_flight=0, refused=True)
            if own.state == "done":  # a branch's slot given up: its own copy again takes another
                if own.holder != copy:
                    return Admission(admitted=False, in_flight=0, duplicate=True)
                own.state = "waiting"
            mine = (own.queued_at, own.order)
            ahead = sum(
                _size(p)
                for p in live.values()
                if (p.kind, p.key) == line and p.state == "waiting" and (p.queued_at, p.order) < mine
            )
            fair = fair_slots if own.kind == "run" else None  # a line of branch slots: its limit alone
            share = _share(own.kind, own.key, fair, self._weights(live)) if fair else None
            held = sum(_size(live[rid]) for rid in held_ids)
            verdict, bound = _decide(held, ahead + size - 1, limit=limit, share=share, on_limit=on_limit)
            evicted = None
            if verdict == "evict" and held_ids:
                evicted = held_ids[0]
                self._places[evicted].state = "evicted"
                held -= 1
            if verdict in ("held", "evict"):
                own.state, own.lease_until, own.holder, own.message = "held", now + lease_seconds, copy, None
                return Admission(
                    admitted=True, in_flight=held + size, ahead=ahead, limit=bound, evicted=evicted
                )
            if verdict == "refused":
                own.state, own.message = "refused", None
                return Admission(admitted=False, in_flight=held, ahead=ahead, limit=bound, refused=True)
            carrier = new or own.backstop is None or own.backstop == copy
            if not carrier and own.backstop_due is not None:
                carrier = own.backstop_due + BACKSTOP_LATE_SECONDS < now
            own.lease_until = now + backstop_seconds(ahead, bound) + WAIT_LEASE_SECONDS
            own.waits, own.woken_at = own.waits + 1, None
            return Admission(admitted=False, in_flight=held, ahead=ahead, limit=bound, carrier=carrier)

    def park(
        self, *, key: str, waiters: list[tuple[str, Mapping[str, Any]]], limit: int | None, weight: int = 1
    ) -> None:
        with self._lock:
            now = self._now()
            for run_id, message in waiters:
                if run_id not in self._places:
                    self._places[run_id] = _Place(
                        kind="run", key=key, state="waiting", queued_at=now, order=len(self._places),
                        lease_until=now + PARKED_SECONDS, weight=max(1, weight), bound=limit,
                        message=dict(message),
                    )  # fmt: skip

    def parked(self, run_id: str, *, backstop: str, seconds: float) -> None:
        with self._lock:
            place = self._places.get(run_id)
            if place is not None and place.state == "waiting":
                place.backstop, place.backstop_due = backstop, self._now() + seconds

    def wake(
        self, *, fair_slots: int | None = None, keys: list[str] | None = None, kind: SlotKind = "run"
    ) -> list[Wake]:
        with self._lock:
            now = self._now()
            live = self._lines(now)
            every = keys is None or (fair_slots is not None and kind == "run")
            line = sorted(
                (p.queued_at, p.order, rid)
                for rid, p in live.items()
                if p.state == "waiting" and p.message is not None
                and (every or (p.kind == kind and p.key in (keys or ())))
            )  # fmt: skip
            weights = self._weights(live)
            recent = now - WAKE_SECONDS
            woken: list[Wake] = []
            for of_kind, key in sorted({(live[rid].kind, live[rid].key) for _, _, rid in line}):
                mine = [rid for _, _, rid in line if (live[rid].kind, live[rid].key) == (of_kind, key)]
                held = sum(
                    _size(p) for p in live.values() if (p.kind, p.key) == (of_kind, key) and p.state == "held"
                )
                bound = effective_limit(live[mine[0]].bound, _share(of_kind, key, fair_slots, weights))
                free = min(_free(bound, held), WAKE_BATCH - len(woken))
                ready = mine[: max(0, free)]
                if of_kind == "branch":  # a pack waits for room for all its branches
                    ready = _within(ready, free, lambda rid: _size(live[rid]))
                ready = [rid for rid in ready if (live[rid].woken_at or -1e18) <= recent]
                for rid in ready:
                    place = live[rid]
                    place.woken_at = now
                    woken.append(Wake(rid, key, dict(place.message or {}), of_kind))
            return woken

    def release(self, run_id: str, *, waiting: bool = False) -> None:
        with self._lock:
            place = self._places.get(run_id)
            if place is not None and place.state == ("waiting" if waiting else "held"):
                place.state, place.message, place.lease_until = "done", None, self._now()

    def keys_of(self, run_ids: list[str]) -> dict[str, str]:
        with self._lock:
            places = {rid: self._places[rid] for rid in run_ids if rid in self._places}
            return {rid: place.key for rid, place in places.items() if place.kind == "run"}

    def counts(self) -> dict[str, KeyCounts]:
        with self._lock:
            now = self._now()
            found: dict[str, dict[str, int]] = {}
            for rid, place in self._places.items():
                live = 1 if place.state not in _LIVE_STATES or self._live(place, rid, now) else 0
                _tally(found, place.kind, place.key, place.state, live, live * _size(place), place.waits)
            return {key: KeyCounts(**values) for key, values in found.items()}

    def forget(self, *, before: datetime, dry_run: bool = False) -> int:
        with self._lock:
            # ``before`` on this store's clock: as long before now as it is before the wall's now
            cut = self._now() - (utcnow() - before).total_seconds()
            old = [rid for rid, place in self._places.items() if place.lease_until < cut]
            if not dry_run:
                for rid in old:
                    del self._places[rid]
            return len(old)

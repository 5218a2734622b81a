"""The two SQL databases the stores run on, and the statements that differ between them.

Only SQLite and PostgreSQL are supported: both offer ``INSERT ... ON CONFLICT``
and ``RETURNING``, which keep every write a single atomic statement. The
``INSERT`` that carries ``on_conflict_do_*`` comes from each dialect's own
module; :func:`insert` picks it, and :func:`upserts` builds the run store's once
per dialect. Locks: :func:`advisory_lock` for one transaction,
:func:`held_lock` around a block of work that uses other connections.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Engine, Executable, Select, Table, func, select
from sqlalchemy.dialects import postgresql, sqlite

from orchestration.store.tables import checkpoints, runs

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
    save_checkpoint: Executable
    finish_loop: Executable


@functools.cache
def upserts(dialect: str) -> Upserts:
    """Insert a run unless its id exists (``RETURNING`` tells which); replace a loop's checkpoint;
    record a loop's result."""
    run = insert(runs, dialect).on_conflict_do_nothing(index_elements=["id"]).returning(runs.c.id)
    saved = insert(checkpoints, dialect)
    saved = saved.on_conflict_do_update(
        index_elements=["run_id", "path"],
        set_={
            "iteration": saved.excluded.iteration,
            "state": saved.excluded.state,
            "updated_at": saved.excluded.updated_at,
        },
    )
    finished = insert(checkpoints, dialect)
    finished = finished.on_conflict_do_update(
        index_elements=["run_id", "path"],
        set_={
            "finished": True,
            "result": finished.excluded.result,
            "updated_at": finished.excluded.updated_at,
        },
    )
    return Upserts(create_run=run, save_checkpoint=saved, finish_loop=finished)

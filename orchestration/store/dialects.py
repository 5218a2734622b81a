"""The two SQL databases the stores run on, and the statements that differ between them.

Only SQLite and PostgreSQL are supported: both offer ``INSERT ... ON CONFLICT``
and ``RETURNING``, which keep every write a single atomic statement. The
``INSERT`` that carries ``on_conflict_do_*`` comes from each dialect's own
module; :func:`insert` picks it.
"""

from __future__ import annotations

import hashlib

from sqlalchemy import Engine, Select, Table, func, select
from sqlalchemy.dialects import postgresql, sqlite

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


def advisory_lock(key: str) -> Select[tuple[object]]:
    """A PostgreSQL lock on ``key`` held until the transaction ends (SQLite locks the whole file)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return select(func.pg_advisory_xact_lock(int.from_bytes(digest, "big", signed=True)))

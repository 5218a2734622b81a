"""Branch slots named as such (issue 39): ``concurrency_slots.kind`` ('run' or 'branch').

A key's line of branch slots was a line of keys named ``<key>\\x1fbranches``: its rows become
``kind='branch'`` rows of the plain key, and the lines are looked up by ``(kind, key)``. A line
whose key was hashed to fit (a key of more than 246 characters) keeps its hash as its key: its
rows stop counting when their leases end, as a new line of the plain key starts. An index on
``lease_until`` serves retention, which now deletes the rows that stopped counting long ago.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 02:00:00+00:00
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: What ended the name of a key's line of branch slots before this revision.
_SUFFIX = "\x1fbranches"
_WIDTH = 255


def upgrade() -> None:
    with op.batch_alter_table("concurrency_slots") as batch:
        batch.add_column(sa.Column("kind", sa.String(length=16), nullable=False, server_default="run"))
        batch.drop_index("ix_concurrency_slots_key_state_queued_at")
        batch.create_index(
            "ix_concurrency_slots_kind_key_state_queued_at", ["kind", "key", "state", "queued_at"]
        )
        batch.create_index("ix_concurrency_slots_lease_until", ["lease_until"])
    op.execute(
        sa.text(
            "UPDATE concurrency_slots SET kind = 'branch', key = substr(key, 1, length(key) - :cut)"
            " WHERE key LIKE :named"
        ).bindparams(cut=len(_SUFFIX), named=f"%{_SUFFIX}")
    )


def _line(key: str) -> str:
    """The name of ``key``'s line of branch slots before this revision."""
    if len(key) + len(_SUFFIX) <= _WIDTH:
        return key + _SUFFIX
    return hashlib.sha256(key.encode()).hexdigest() + _SUFFIX


def downgrade() -> None:
    connection = op.get_bind()
    keys = connection.execute(sa.text("SELECT DISTINCT key FROM concurrency_slots WHERE kind = 'branch'"))
    for (key,) in keys.all():
        connection.execute(
            sa.text("UPDATE concurrency_slots SET key = :line WHERE kind = 'branch' AND key = :key"),
            {"line": _line(str(key)), "key": key},
        )
    with op.batch_alter_table("concurrency_slots") as batch:
        batch.drop_index("ix_concurrency_slots_lease_until")
        batch.drop_index("ix_concurrency_slots_kind_key_state_queued_at")
        batch.create_index("ix_concurrency_slots_key_state_queued_at", ["key", "state", "queued_at"])
        batch.drop_column("kind")

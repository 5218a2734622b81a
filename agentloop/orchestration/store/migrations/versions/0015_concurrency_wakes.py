"""Parked waiters and weighted shares (issue 39): a waiting run's launch message, its wake and its
backstop copy, the copy that holds its slot, and each run's weight and declared limit.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05 23:20:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("weight", "bound", "message", "woken_at", "holder", "backstop", "backstop_due")


def upgrade() -> None:
    with op.batch_alter_table("concurrency_slots") as batch:
        batch.add_column(sa.Column("weight", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("bound", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("message", sa.Text(), nullable=True))
        batch.add_column(sa.Column("woken_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("holder", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("backstop", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("backstop_due", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("concurrency_slots") as batch:
        for name in reversed(_COLUMNS):
            batch.drop_column(name)

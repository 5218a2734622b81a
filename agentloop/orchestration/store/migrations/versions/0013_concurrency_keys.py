"""Concurrency keys (issue 39): ``concurrency_slots``, each keyed run's place under its key.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 15:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "concurrency_slots",
        sa.Column("run_id", sa.String(length=255), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=False),
        sa.Column("waits", sa.Integer(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_concurrency_slots")),
    )
    op.create_index(
        "ix_concurrency_slots_key_state_queued_at", "concurrency_slots", ["key", "state", "queued_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_concurrency_slots_key_state_queued_at", table_name="concurrency_slots")
    op.drop_table("concurrency_slots")

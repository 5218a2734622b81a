"""A settled question's message sent again: ``human_waits.resumed_at``, NULL until it is.

A wait that is answered (or expired) and not resumed is the work left by a process that died
between settling it and sending the paused task again; ``agentloop.resume`` and
``agentloop.resume_settled`` send it. Waits settled before this revision were resumed then.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-08 10:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("human_waits") as batch:
        batch.add_column(sa.Column("resumed_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE human_waits SET resumed_at = answered_at WHERE status <> 'pending'")


def downgrade() -> None:
    with op.batch_alter_table("human_waits") as batch:
        batch.drop_column("resumed_at")

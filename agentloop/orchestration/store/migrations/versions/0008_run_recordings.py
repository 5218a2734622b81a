"""Recorded runs: ``run_recordings``, one row per place a recorded run's step got something.

What a run launched with ``record=True`` received from outside its code (model turns, tool
results, human answers, cache hits), under its root run id, so ``agentloop replay`` can run it
again against the recording (``actions/recording.py``).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-09 10:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "run_recordings",
        sa.Column("run_id", sa.String(length=255), nullable=False),
        sa.Column("path", sa.String(length=1024), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column(
            "data",
            sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql"),
            nullable=False,
        ),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "path", "iteration", "kind", "seq", name=op.f("pk_run_recordings")),
    )


def downgrade() -> None:
    op.drop_table("run_recordings")

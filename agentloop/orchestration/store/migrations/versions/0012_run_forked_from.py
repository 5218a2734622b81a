"""Where a forked run came from: ``runs.forked_from``, ``{"run_id", "path", "iteration"}``.

Written when ``agentloop replay RUN --fork-at PATH:ITERATION`` (``orchestration/forks/``) records
the new run it forks from a recorded one: the recorded run's id and the place it went on live
from. NULL for every other run, and for every run before this revision.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 15:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(
            sa.Column(
                "forked_from",
                sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql"),
                nullable=True,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("forked_from")

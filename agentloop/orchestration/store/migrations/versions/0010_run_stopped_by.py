"""How a run that returned ended: ``runs.stopped_by``, ``"complete"`` or ``"bound"``.

``"bound"`` when a loop of the run hit its ``max_iterations`` before it was complete (its last
event says ``stopped_by: "bound"``), ``"complete"`` otherwise; written when the run ends
``succeeded`` or ``degraded``, NULL for a run that failed, was cancelled or ended before this
revision (its events still say it).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 12:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("stopped_by", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("stopped_by")

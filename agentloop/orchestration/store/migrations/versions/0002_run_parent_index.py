"""Index runs by parent, so a batch's summary counts its child runs without a scan.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 00:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_runs_parent_run_id_status", "runs", ["parent_run_id", "status"])
    op.create_index("ix_runs_runnable_status", "runs", ["runnable", "status"])


def downgrade() -> None:
    op.drop_index("ix_runs_runnable_status", table_name="runs")
    op.drop_index("ix_runs_parent_run_id_status", table_name="runs")

"""The indexes the runs list and retention need at volume (``bench/store_volume.py``).

* ``runs (created_at, id)``: the runs list is ordered by ``created_at DESC, id DESC``; with the
  tie-breaker in the index, the newest page is read straight off it (it replaces ``runs
  (created_at)``).
* ``runs (runnable, created_at)``: the runs list of one runnable, newest first, without reading
  and sorting all its runs (a popular runnable has tens of thousands).
* ``runs (finished_at)``: retention (``orchestration/store/retention.py``) finds the workflows
  that ended before its cut-off, the oldest first.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 03:30:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.create_index("ix_runs_created_at_id", ["created_at", "id"])
        batch.drop_index("ix_runs_created_at")
        batch.create_index("ix_runs_runnable_created_at", ["runnable", "created_at"])
        batch.create_index("ix_runs_finished_at", ["finished_at"])


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_finished_at")
        batch.drop_index("ix_runs_runnable_created_at")
        batch.create_index("ix_runs_created_at", ["created_at"])
        batch.drop_index("ix_runs_created_at_id")

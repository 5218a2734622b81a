"""How often a loop was started without progress: ``checkpoints.deliveries``.

The delivery limit (``AGENTLOOP_DELIVERY_LIMIT``) on every broker: each task that starts a loop
counts one more delivery in the statement that reads the loop's record
(``RunStore.start_loops``); saving a checkpoint sets it back to 0. Rows written before this
revision start at 0.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 11:50:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("deliveries", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_column("deliveries")

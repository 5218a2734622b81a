"""Record who owns a run: the digest of the launch message that created it and its secret token.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 00:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("launch_digest", sa.String(64), nullable=True))
        batch.add_column(sa.Column("owner_token", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("owner_token")
        batch.drop_column("launch_digest")

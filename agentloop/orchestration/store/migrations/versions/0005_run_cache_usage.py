"""Step-cache use per run: hits, misses and the tokens the hits saved, summed like token usage.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 03:30:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("cache_hits", "cache_misses", "tokens_saved")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)

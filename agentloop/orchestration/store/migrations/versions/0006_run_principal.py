"""Record whose run it is over HTTP: the principal of the token that started it (``runs.principal``).

Not the run's owner of 0003 (the launch that may end it, by a secret token its
tasks carry): a principal names a caller of ``agentloop serve``, and only
runs started through it have one. Indexed with ``created_at`` for the runs list
of one principal, newest first.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 04:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("principal", sa.String(255), nullable=True))
        batch.create_index("ix_runs_principal_created_at", ["principal", "created_at"])


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_principal_created_at")
        batch.drop_column("principal")

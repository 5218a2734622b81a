"""Create a run only while no run of its runnable is open, as one atomic step (the SQL store's
:meth:`~agentloop.orchestration.store.SqlRunStore.create_run_unless_open`; a beat batch is started this way,
so two ticks at the same instant never start two batches of one schedule).

One ``INSERT ... SELECT ... WHERE NOT EXISTS (an open run of the runnable)``. On SQLite the
statement holds the file's write lock, and a statement that read before another writer committed
fails with ``database is locked`` and is tried again (``retry.py``). On PostgreSQL two such
statements could both see no open run (each reads its own snapshot), so the transaction first
takes an advisory lock on the runnable: the second waits for the first to commit, then sees its
run.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, exists, literal, select

from agentloop.orchestration.store.dialects import advisory_lock, insert
from agentloop.orchestration.store.protocol import TERMINAL_STATUSES, RunRecord
from agentloop.orchestration.store.tables import runs

__all__ = ["insert_unless_open"]


def insert_unless_open(connection: Connection, dialect: str, values: dict[str, Any]) -> Row[Any]:
    """Insert the run of ``values`` unless its runnable has an open run, inside the caller's
    transaction; the row of that run id when it exists now, else of the earliest open run."""
    columns = [runs.c[name] for name in RunRecord.__dataclass_fields__]
    is_open = (runs.c.runnable == values["runnable"]) & runs.c.status.not_in(sorted(TERMINAL_STATUSES))
    row = select(*(literal(value, runs.c[name].type).label(name) for name, value in values.items()))
    statement = insert(runs, dialect).from_select(list(values), row.where(~exists().where(is_open)))
    if dialect == "postgresql":
        connection.execute(advisory_lock(f"open run of {values['runnable']}"))
    connection.execute(statement.on_conflict_do_nothing(index_elements=["id"]))
    own = connection.execute(select(*columns).where(runs.c.id == values["id"])).first()
    if own is not None:
        return own
    return connection.execute(select(*columns).where(is_open).order_by(runs.c.created_at).limit(1)).one()

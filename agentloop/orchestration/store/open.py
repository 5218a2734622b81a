"""``open_store``: one call from a URL to migrated, ready-to-use stores."""

from __future__ import annotations

from agentloop.orchestration.store.database import create_engine_for
from agentloop.orchestration.store.migrate import upgrade_database
from agentloop.orchestration.store.retry import StoreRetry
from agentloop.orchestration.store.sql import SqlRunStore
from agentloop.orchestration.store.tool_store import SqlToolStore


def open_store(
    url: str | None = None, *, migrate: bool = True, retry: StoreRetry | None = None
) -> tuple[SqlRunStore, SqlToolStore]:
    """The run store and tool store on ``url`` (default: ``DATABASE_URL`` or the SQLite file).

    The database is migrated to the latest revision first unless ``migrate``
    is false (retried, like every run store call, while the database is
    unreachable: ``retry``, default 60 s). Both stores share one engine
    (``run_store.engine``), which the caller may ``dispose()`` when done.

    The engine does not ping a pooled connection before each use (SQLAlchemy's
    ``pool_pre_ping``): every call of both stores, and of the wait store beside them,
    is retried on a connection-level error, so a connection that died while it sat in
    the pool fails its first statement, is replaced, and the call runs again. That
    keeps one database round trip per store call instead of two.
    """
    engine = create_engine_for(url, pool_pre_ping=False)
    retry = retry or StoreRetry()
    if migrate:
        retry.call(upgrade_database, engine)
    return SqlRunStore(engine, retry=retry), SqlToolStore(engine, retry=retry)

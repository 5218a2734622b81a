"""Opening the record-search agent's infrastructure: database, sample data, tool store.

:func:`open_resources` gives a fresh set (the caller disposes it);
:func:`shared_resources` gives one set per database URL per process, for
Celery context factories that run once per task.

Setting up is safe when many workers' first tasks do it at once: on PostgreSQL
they take turns under one advisory lock (:func:`~agentloop.orchestration.store.dialects.held_lock`),
so no two create the sample tables together; on SQLite each step tolerates a
twin (tables created meanwhile, rows inserted only when missing, tools upserted).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from agentloop.examples.record_search.catalog import SEARCHABLE_CATEGORIES, SearchableCategory
from agentloop.examples.record_search.sample_data import build_sample_database, load_tools
from agentloop.examples.record_search.service import RecordSearchService
from agentloop.orchestration.store import (
    SqlToolStore,
    StoreRetry,
    create_engine_for,
    database_url,
    normalize_url,
    upgrade_database,
)
from agentloop.orchestration.store.dialects import held_lock

#: The advisory lock under which one process at a time sets up a database's sample data and tools.
SETUP_LOCK = "agentloop.examples.record_search.setup"


@dataclass(frozen=True, kw_only=True)
class RecordSearchResources:
    """The engine, the search service over it, and the tool store holding the agent's tools."""

    engine: Engine
    service: RecordSearchService
    tool_store: SqlToolStore
    searchable_categories: tuple[SearchableCategory, ...]
    record_counts: dict[str, int]

    @property
    def database(self) -> str:
        """The database URL with any password hidden (for display)."""
        return self.engine.url.render_as_string(hide_password=True)

    def dispose(self) -> None:
        self.engine.dispose()


def resolve_database_url(url: str | None = None) -> str:
    """``url``, else ``DATABASE_URL``, else the default SQLite file of the framework's store."""
    return normalize_url(url) if url else database_url()


def open_resources(url: str | None = None, *, retry: StoreRetry | None = None) -> RecordSearchResources:
    """Connect, migrate the ``AiTool`` table, build the sample records and load the tools (idempotent).

    A database that is briefly away (restarting, refusing connections) is waited for as the run
    store waits for its own (``retry``: 60 s of :class:`~agentloop.orchestration.store.StoreRetry`
    by default): every step is safe to run again, so the whole set-up is tried again."""
    engine = create_engine_for(resolve_database_url(url))
    try:
        return (retry or StoreRetry()).call(_set_up, engine)
    except BaseException:
        engine.dispose()
        raise


def _set_up(engine: Engine) -> RecordSearchResources:
    upgrade_database(engine)
    tool_store = SqlToolStore(engine)
    with held_lock(engine, SETUP_LOCK):  # concurrent first tasks set up one at a time
        counts = build_sample_database(engine)
        load_tools(tool_store)
    service = RecordSearchService.create(engine=engine, categories=SEARCHABLE_CATEGORIES)
    return RecordSearchResources(
        engine=engine,
        service=service,
        tool_store=tool_store,
        searchable_categories=SEARCHABLE_CATEGORIES,
        record_counts=counts,
    )


_shared: dict[str, RecordSearchResources] = {}
_shared_lock = threading.Lock()


def shared_resources(url: str | None = None) -> RecordSearchResources:
    """One :class:`RecordSearchResources` per database URL in this process (opened on first use)."""
    resolved = resolve_database_url(url)
    key = make_url(resolved).render_as_string(hide_password=False)
    with _shared_lock:
        resources = _shared.get(key)
        if resources is None:
            resources = _shared[key] = open_resources(resolved)
        return resources


def dispose_shared_resources() -> None:
    """Dispose every shared set (tests, and processes that want to let go of their connections)."""
    with _shared_lock:
        for resources in _shared.values():
            resources.dispose()
        _shared.clear()

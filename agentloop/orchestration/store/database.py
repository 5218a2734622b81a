"""Where the store lives and how to connect to it.

``Settings.database_url`` picks the database (``DATABASE_URL``; without it
a SQLite file at ``$AGENTLOOP_HOME/agentloop.sqlite3``, ``AGENTLOOP_HOME``
defaulting to the per-user data folder: see :mod:`agentloop.orchestration.settings`). Plain
``postgresql://`` URLs are rewritten to use psycopg 3. SQLite files are opened
in WAL mode with a busy timeout so several worker processes can share one
file.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.pool import StaticPool

from agentloop.orchestration.settings import Settings, load_settings
from agentloop.orchestration.store.json_values import json_text

SQLITE_BUSY_TIMEOUT_MS = 30_000

_POSTGRES_PREFIXES = ("postgresql://", "postgres://")


def normalize_url(url: str) -> str:
    """``url`` with ``postgresql://`` / ``postgres://`` rewritten to ``postgresql+psycopg://``."""
    for prefix in _POSTGRES_PREFIXES:
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def database_url(settings: Settings | None = None) -> str:
    """The store's URL: ``settings.database_url`` (default: :func:`load_settings`), normalized;
    the folder of a SQLite file is created."""
    url = normalize_url((settings or load_settings()).database_url)
    path = _sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    return url


def _sqlite_file(url: str) -> Path | None:
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:") or parsed.query.get("mode") == "memory":
        return None
    return Path(database)


def _configure_sqlite(engine: Engine, *, wal: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            if wal:
                cursor.execute("PRAGMA journal_mode = WAL")
                cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()


#: What psycopg says of a connection whose socket died in the middle of a command: SQLAlchemy does not
#: count it as a disconnect, so the pool would hand the broken connection out again.
_BROKEN_CONNECTION = ("connection in transaction status ACTIVE", "connection in transaction status UNKNOWN")


def counts_as_disconnect(error: BaseException) -> bool:
    """Whether psycopg's ``error`` says the connection's socket died in the middle of a command
    (which SQLAlchemy's dialect does not count as a disconnect)."""
    return any(text in str(error) for text in _BROKEN_CONNECTION)


def _count_broken_connections_as_disconnects(engine: Engine) -> None:
    @event.listens_for(engine, "handle_error")
    def _on_error(context: ExceptionContext) -> None:
        if not context.is_disconnect and counts_as_disconnect(context.original_exception):
            context.is_disconnect = True  # the pool discards it; the store's retry tries again


def _forget_connections_in_forked_children(engine: Engine) -> None:
    """A process forked from this one starts with an empty pool (SQLAlchemy's documented pattern:
    ``dispose(close=False)`` in the child drops the inherited connections without closing them, so
    the parent's sockets are never used, nor closed, by the child).

    A prefork worker forks its pool children from its main process, which opens the run store when
    Celery calls a task's ``on_failure`` there (the hard time limit killed the task's child): every
    child forked after that would otherwise share the main process's PostgreSQL connection.
    """
    reference = weakref.ref(engine)  # the hook outlives nothing: a collected engine is skipped

    def in_child() -> None:
        forked = reference()
        if forked is not None:
            forked.dispose(close=False)

    os.register_at_fork(after_in_child=in_child)


#: libpq connection options for every PostgreSQL engine (seconds, and milliseconds for tcp_user_timeout).
POSTGRES_CONNECT_ARGS: dict[str, Any] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
    # The server ends a session left idle inside a transaction (its client gone mid-transaction in an
    # outage) after 10 s, so its row locks cannot hold the next attempt of the same write for ever.
    "options": "-c idle_in_transaction_session_timeout=10000",
}


def create_engine_for(url: str | None = None, **kwargs: Any) -> Engine:
    """An engine for ``url`` (default :func:`database_url`), ready for several processes.

    SQLite files get WAL mode, ``synchronous=NORMAL`` and a busy timeout; the
    file's folder is created. An in-memory SQLite database (``sqlite://``) is
    one connection shared by every thread, for single-process tests. Every
    engine pings pooled connections before use, never quotes a statement's parameters in an error
    or a log line, and a process forked from this one starts with a pool of its own
    (:func:`_forget_connections_in_forked_children`). Extra keyword arguments go to
    :func:`sqlalchemy.create_engine`.
    """
    resolved = normalize_url(url) if url else database_url()
    # A statement's parameters are a run's content (inputs, results, events): an error or a log line
    # never quotes them (SQLAlchemy's ``hide_parameters``), whether it reaches a log or a record.
    options: dict[str, Any] = {"pool_pre_ping": True, "hide_parameters": True, **kwargs}
    parsed = make_url(resolved)
    if parsed.get_backend_name() != "sqlite":
        if parsed.get_backend_name() == "postgresql":
            # A database that goes silent (a dead host, a dropped route) must not hold a task forever:
            # connecting gives up, idle connections are probed, and unacknowledged writes time out.
            options["connect_args"] = {**POSTGRES_CONNECT_ARGS, **options.get("connect_args", {})}
            if parsed.get_driver_name() == "psycopg":  # takes bytes; psycopg2 wants text
                # JSON parameters (a pack's events, results, checkpoints): orjson's where it agrees
                options.setdefault("json_serializer", json_text)
        engine = create_engine(resolved, **options)
        _count_broken_connections_as_disconnects(engine)
        _forget_connections_in_forked_children(engine)
        return engine
    path = _sqlite_file(resolved)
    connect_args = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, **options.pop("connect_args", {})}
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    else:  # an in-memory database lives in one connection: share it between threads
        connect_args.setdefault("check_same_thread", False)
        options.setdefault("poolclass", StaticPool)
    engine = create_engine(resolved, connect_args=connect_args, **options)
    _configure_sqlite(engine, wal=path is not None)
    if path is not None:  # an in-memory database is one process's: a child keeps its copy
        _forget_connections_in_forked_children(engine)
    return engine

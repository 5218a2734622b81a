"""The store's statements of fixed text, sent on PostgreSQL by psycopg itself on a pooled connection.

The run store's writes on PostgreSQL are each one statement whose text never changes
(:mod:`~agentloop.orchestration.store.dialects`, :mod:`~agentloop.orchestration.store.bulk_sql`),
and the read every task starts with (its run's owner and status) is one ``select`` of bound
values. Sent through a SQLAlchemy ``Connection``, such a statement cost about 120-170 µs of CPU
above psycopg's own (``python -m bench.store_calls``): the checkout with autocommit switched on
and back, the execution context, the cache key, the result. A pipeline pays it once a stage, a
pack once a write, every task once. :func:`run_fixed` compiles each statement once per dialect and
sends it on the pooled connection's psycopg connection, in autocommit (one round trip, as
:func:`~agentloop.orchestration.store.dialects.one_statement` does), its parameters and results
converted by the statement's declared types as SQLAlchemy converts them. On SQLite it goes through
SQLAlchemy, as before.

What SQLAlchemy does around a statement is done here too:

- psycopg's error is raised as SQLAlchemy's (``DBAPIError.instance``), with the engine's
  ``hide_parameters``: the store's retry (:mod:`~agentloop.orchestration.store.retry`) reads it
  the same, and so does a failed checkout (a refused connection);
- a connection that died (the dialect's ``is_disconnect``, or
  :func:`~agentloop.orchestration.store.database.counts_as_disconnect`) is invalidated, so the
  pool never hands it out again, and the error says so (``connection_invalidated``);
- anything else that stops the statement half way (a task's time limit) invalidates the connection
  too: what state it was left in is unknown;
- a pooled connection an outage left inside a transaction refuses autocommit: it is invalidated,
  which the retry counts as a connection's fault;
- when anything listens to the engine's statement events (``before_cursor_execute``,
  ``after_cursor_execute``: OpenTelemetry's SQLAlchemy instrumentation, or a test that counts
  statements), the statement goes through SQLAlchemy instead, so the listener sees every one.
"""

from __future__ import annotations

import threading
import weakref
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from sqlalchemy import Engine, Select, TextClause, TextualSelect
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.pool import PoolProxiedConnection

from agentloop.orchestration.store.database import counts_as_disconnect
from agentloop.orchestration.store.dialects import one_statement

__all__ = ["Fixed", "run_fixed"]

_Convert = Callable[[Any], Any]
Fixed = TextClause | TextualSelect | Select[Any]
r"""A statement of fixed text: ``text(...)``, with ``.columns(...)`` when it returns rows, or a
``select(...)`` whose values are all ``bindparam(...)``\ s (no expanding ``IN``)."""


@dataclass(frozen=True)
class _Compiled:
    """A statement's text in psycopg's parameter style, with the conversions its types ask for."""

    sql: str
    binds: tuple[tuple[str, _Convert | None], ...]
    columns: tuple[_Convert | None, ...]
    row: Callable[..., Any]


_COMPILED: weakref.WeakKeyDictionary[Dialect, weakref.WeakKeyDictionary[Fixed, _Compiled]]
_COMPILED = weakref.WeakKeyDictionary()  # an engine's dialect, and a statement, may be collected
_COMPILING = threading.Lock()  # a pack's threads send statements side by side


def _compiled(dialect: Dialect, statement: Fixed) -> _Compiled:
    try:
        return _COMPILED[dialect][statement]
    except KeyError:
        pass
    selected = statement.selected_columns if _returns_rows(statement) else ()
    if isinstance(statement, TextualSelect) and not selected:
        raise ValueError(
            "a statement that returns rows declares their columns: text(...).columns(column(...))"
        )
    compiled = statement.compile(dialect=dialect)
    if "POSTCOMPILE" in compiled.string:  # its text is only known with its values: no fixed text
        raise ValueError("a statement of fixed text has no expanding IN: send it through SQLAlchemy")
    binds = tuple(
        (name, bind.type.dialect_impl(dialect).bind_processor(dialect))
        for bind, name in compiled.bind_names.items()
    )
    columns = tuple(column.type.dialect_impl(dialect).result_processor(dialect, None) for column in selected)
    row = namedtuple("row", [column.name for column in selected])  # type: ignore[misc]
    found = _Compiled(compiled.string, binds, columns, row)
    with _COMPILING:
        _COMPILED.setdefault(dialect, weakref.WeakKeyDictionary())[statement] = found
    return found


def _returns_rows(statement: Fixed) -> TypeGuard[TextualSelect | Select[Any]]:
    return not isinstance(statement, TextClause)


def _listened(engine: Engine) -> bool:
    dispatch = engine.dispatch
    return bool(dispatch.before_cursor_execute) or bool(dispatch.after_cursor_execute)


def run_fixed(engine: Engine, statement: Fixed, params: Mapping[str, Any]) -> Sequence[Any]:
    """Run ``statement`` (a statement of fixed text, atomic by itself) with ``params`` on
    ``engine``: the rows of a ``TextualSelect`` or a ``Select`` (by index or by column name),
    none for a plain ``TextClause``. On PostgreSQL psycopg sends it, in autocommit; on another
    database, or to an engine whose statement events someone listens to, SQLAlchemy does."""
    if engine.dialect.name != "postgresql" or _listened(engine):
        with one_statement(engine) as connection, connection.begin():
            result = connection.execute(statement, params)
            return result.all() if _returns_rows(statement) else ()
    compiled = _compiled(engine.dialect, statement)
    values = {name: _converted(params[name], convert) for name, convert in compiled.binds}
    try:
        pooled = engine.raw_connection()
    except _dbapi_error(engine) as error:  # no connection to be had: raised as engine.connect() raises it
        gone = engine.dialect.is_disconnect(error, None, None)
        raise _translated(engine, error, invalidated=gone) from error
    try:
        fetched = _execute(engine, pooled, compiled, values)
    finally:
        pooled.close()
    columns = compiled.columns
    return [compiled.row(*map(_converted, row, columns)) for row in fetched]


def _converted(value: Any, convert: _Convert | None) -> Any:
    return value if convert is None else convert(value)


def _dbapi_error(engine: Engine) -> type[Any]:
    error: type[Any] = engine.dialect.loaded_dbapi.Error
    return error


def _translated(
    engine: Engine, error: Exception, statement: str | None = None, values: Any = None, *, invalidated: bool
) -> StatementError:
    """psycopg's ``error`` as SQLAlchemy raises it (``DBAPIError.instance``): what the store's
    retry and its callers read."""
    return DBAPIError.instance(
        statement,
        values,
        error,
        _dbapi_error(engine),
        hide_parameters=engine.hide_parameters,
        connection_invalidated=invalidated,
        dialect=engine.dialect,
    )


def _execute(
    engine: Engine, pooled: PoolProxiedConnection, compiled: _Compiled, values: dict[str, Any]
) -> list[tuple[Any, ...]]:
    """Send the statement on ``pooled``'s psycopg connection in autocommit; its rows. The
    connection is invalidated when it cannot be trusted after what happened."""
    driver: Any = pooled.driver_connection
    try:
        driver.autocommit = True
    except _dbapi_error(engine) as error:  # an outage left it mid-transaction (retry.py): never reuse it
        pooled.invalidate(error)
        raise _translated(engine, error, compiled.sql, values, invalidated=True) from error
    try:
        cursor = driver.execute(compiled.sql, values)
        rows: list[tuple[Any, ...]] = cursor.fetchall() if compiled.columns else []
    except _dbapi_error(engine) as error:
        gone = engine.dialect.is_disconnect(error, driver, None) or counts_as_disconnect(error)
        if gone:
            pooled.invalidate(error)
        else:
            _back_to_transactions(engine, pooled)
        raise _translated(engine, error, compiled.sql, values, invalidated=gone) from error
    except BaseException as stopped:  # a time limit, a signal: the connection's state is unknown
        pooled.invalidate(stopped if isinstance(stopped, Exception) else None)
        raise
    _back_to_transactions(engine, pooled)
    return rows


def _back_to_transactions(engine: Engine, pooled: PoolProxiedConnection) -> None:
    """Turn autocommit off again, as the pool's other users expect; a connection that refuses is
    invalidated."""
    try:
        driver: Any = pooled.driver_connection
        driver.autocommit = False
    except _dbapi_error(engine) as error:
        pooled.invalidate(error)
        raise _translated(engine, error, invalidated=True) from error

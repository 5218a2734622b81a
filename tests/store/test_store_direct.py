"""The store's fixed PostgreSQL statements go to psycopg itself (``store/direct.py``), and keep what
SQLAlchemy did around them: a connection the server killed is invalidated and the call retried on
a new one, a statement stopped half way never returns its connection to the pool, a data error is
SQLAlchemy's error and leaves the connection usable, and whoever listens to the engine's statement
events sees every statement."""

from __future__ import annotations

import logging
import signal
import uuid
from collections.abc import Iterator
from datetime import UTC
from typing import Any

import pytest
from sqlalchemy import Engine, Integer, column, event, select, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.exc import DataError, OperationalError

from agentloop.orchestration.errors import StoreUnavailableError
from agentloop.orchestration.store import SqlRunStore, StoreRetry, create_engine_for, open_store
from agentloop.orchestration.store.direct import run_fixed
from agentloop.orchestration.store.tables import UtcDateTime
from tests.services.postgres import private_database
from tests.store.test_store_without_pre_ping import kill_pooled_connections

pytestmark = pytest.mark.integration


@pytest.fixture
def pg_url(pg_admin_url: str) -> Iterator[str]:
    with private_database(pg_admin_url) as url:
        yield url


@pytest.fixture
def store(pg_url: str) -> Iterator[SqlRunStore]:
    run_store, _ = open_store(pg_url, retry=StoreRetry(10, initial=0.01))
    yield run_store
    run_store.engine.dispose()


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    one = create_engine_for(pg_url, pool_pre_ping=False, pool_size=1, max_overflow=0)
    yield one
    one.dispose()


def _backend_pid(engine: Engine) -> int:
    (row,) = run_fixed(engine, text("SELECT pg_backend_pid() AS pid").columns(column("pid", Integer())), {})
    return int(row.pid)


def test_a_stage_whose_connection_the_server_killed_runs_again_on_a_new_one(
    store: SqlRunStore, pg_admin_url: str
) -> None:
    run_id = uuid.uuid4().hex
    store.create_run(run_id=run_id, runnable="x", input={})
    store.start_loops(run_id, ["s/0"])
    assert kill_pooled_connections(pg_admin_url, store.engine) >= 1
    ended, (following, deliveries) = store.finish_loop_then_start(
        run_id, "s/0", {"r": 0}, "s/1", events=[{"phase": "done"}]
    )
    assert (ended, following.finished, deliveries) == ({"r": 0}, False, 1)
    assert [event["phase"] for _, event in store.events(run_id)] == ["done"]  # written once


def test_a_killed_connection_is_sqlalchemys_disconnect_and_never_handed_out_again(
    pg_url: str, pg_admin_url: str
) -> None:
    run_store, _ = open_store(pg_url, retry=StoreRetry(0))  # no retry: the error itself
    try:
        run_id = uuid.uuid4().hex
        run_store.create_run(run_id=run_id, runnable="x", input={})
        assert kill_pooled_connections(pg_admin_url, run_store.engine) >= 1
        with pytest.raises(StoreUnavailableError) as raised:
            run_store.finish_loop(run_id, "p", {"r": 1}, events=[{"phase": "done"}])
        cause = raised.value.__cause__
        assert isinstance(cause, OperationalError) and cause.connection_invalidated
        assert run_store.finish_loop(run_id, "p", {"r": 1}, events=[{"phase": "done"}]) == {"r": 1}
    finally:
        run_store.engine.dispose()


class _TimeLimit(BaseException):
    """What a task's time limit raises in the middle of whatever the task was doing."""


def test_a_statement_stopped_half_way_never_returns_its_connection_to_the_pool(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    first = _backend_pid(engine)
    assert _backend_pid(engine) == first  # the pool of one hands the same connection out again

    def stop(*_: Any) -> None:
        raise _TimeLimit

    caplog.set_level(logging.ERROR, logger="sqlalchemy.pool")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    try:
        with pytest.raises(_TimeLimit):
            run_fixed(engine, text("SELECT pg_sleep(30)"), {})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert _backend_pid(engine) != first  # a new connection: the busy one was thrown away
    assert not caplog.records  # thrown away by us, not by the pool failing to reset it


def test_a_data_error_is_sqlalchemys_and_leaves_the_connection_in_use(engine: Engine) -> None:
    first = _backend_pid(engine)
    divide = text("SELECT 1 / CAST(:zero AS integer) AS quotient").columns(column("quotient", Integer()))
    with pytest.raises(DataError) as raised:
        run_fixed(engine, divide, {"zero": 0})
    assert not raised.value.connection_invalidated
    with engine.connect() as connection:  # back out of autocommit, as the pool's other users expect
        assert connection.connection.driver_connection.autocommit is False  # type: ignore[union-attr]
        connection.execute(text("CREATE TEMPORARY TABLE kept (n integer)"))
        connection.rollback()
        assert connection.execute(text("SELECT to_regclass('pg_temp.kept')")).scalar_one() is None
    assert _backend_pid(engine) == first  # kept: nothing was wrong with it


def test_a_listener_of_statement_events_sees_every_statement(store: SqlRunStore) -> None:
    """OpenTelemetry's SQLAlchemy instrumentation listens so: the statement then goes through
    SQLAlchemy, and returns the same."""
    sent: list[str] = []

    def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement.split()[0].upper())

    run_id = uuid.uuid4().hex
    store.create_run(run_id=run_id, runnable="x", input={})
    direct = store.finish_loop_then_start(run_id, "s/0", {"r": 0}, "s/1", events=[{"phase": "done"}])
    event.listen(store.engine, "before_cursor_execute", note)
    try:
        through = store.finish_loop_then_start(run_id, "s/1", {"r": 1}, "s/2", events=[{"phase": "done"}])
    finally:
        event.remove(store.engine, "before_cursor_execute", note)
    assert sent == ["WITH"]
    assert (direct[0], direct[1].record, direct[1].deliveries) == ({"r": 0}, through[1].record, 1)
    assert through[0] == {"r": 1} and through[1].deliveries == 1


def test_returned_timestamps_are_converted_as_their_column_type_says(engine: Engine) -> None:
    now = text("SELECT now() AS at, CAST(NULL AS timestamptz) AS never, CAST(:n AS jsonb) AS doc")
    typed = now.columns(column("at", UtcDateTime()), column("never", UtcDateTime()), column("doc", JSONB()))
    (row,) = run_fixed(engine, typed, {"n": '{"a": [1, null]}'})
    assert row.at.tzinfo is UTC and row.never is None and row.doc == {"a": [1, None]}


def test_a_statement_that_returns_rows_without_declaring_them_is_refused(engine: Engine) -> None:
    with pytest.raises(ValueError, match="declares their columns"):
        run_fixed(engine, text("SELECT 1").columns(), {})


def test_on_sqlite_the_statement_goes_through_sqlalchemy(tmp_path: Any) -> None:
    sqlite = create_engine_for(f"sqlite:///{tmp_path / 'runs.sqlite3'}")
    try:
        (row,) = run_fixed(sqlite, text("SELECT :n + 1 AS m").columns(column("m", Integer())), {"n": 1})
        assert row.m == 2
    finally:
        sqlite.dispose()


def test_a_select_of_bound_values_reads_as_sqlalchemy_reads_it(store: SqlRunStore) -> None:
    """A run's record: its times as aware datetimes, its JSON as JSON, through either path."""
    run_id = uuid.uuid4().hex
    store.create_run(run_id=run_id, runnable="x", input={"q": [1, None, "é"]})
    store.mark_running(run_id)
    direct = store.get_run(run_id)
    sent: list[str] = []

    def note(*args: Any) -> None:
        sent.append(args[2])

    event.listen(store.engine, "before_cursor_execute", note)
    try:
        through = store.get_run(run_id)
    finally:
        event.remove(store.engine, "before_cursor_execute", note)
    assert sent and direct == through
    assert direct is not None and direct.input == {"q": [1, None, "é"]}
    assert direct.started_at is not None and direct.started_at.tzinfo is UTC


def test_a_select_with_an_expanding_in_is_refused(engine: Engine) -> None:
    from agentloop.orchestration.store.tables import runs

    expanding = select(runs.c.id).where(runs.c.status.in_(["pending", "running"]))
    with pytest.raises(ValueError, match="no expanding IN"):
        run_fixed(engine, expanding, {})


@pytest.mark.parametrize("direct", [True, False], ids=["psycopg", "sqlalchemy"])
def test_an_error_never_quotes_the_statements_parameters(engine: Engine, direct: bool) -> None:
    """A statement's parameters are a run's content: an error, which reaches logs and records,
    names the statement and never what it carried (what the server's own message quotes aside)."""
    failing = text("SELECT length(CAST(:card AS text)) / 0 AS n").columns(column("n", Integer()))
    with pytest.raises(DataError) as raised:
        if direct:
            run_fixed(engine, failing, {"card": "card 4242-4242"})
        else:
            with engine.connect() as connection:
                connection.execute(failing, {"card": "card 4242-4242"})
    assert "4242" not in str(raised.value) and "hidden" in str(raised.value)

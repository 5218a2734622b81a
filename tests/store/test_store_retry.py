"""The SQL run store rides out a PostgreSQL that is away for a few seconds, gives up clearly past
its budget, and never tries again what the data itself got wrong.

PostgreSQL is made unreachable by a TCP proxy between the store and the server
(:class:`~tests.services.tcp_proxy.TcpProxy`): stopped, it refuses new connections
and resets open ones, as a server that went down does.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from retry_support import counting
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import DataError, IntegrityError, OperationalError

from agentloop.orchestration.errors import StoreUnavailableError
from agentloop.orchestration.store import SqlRunStore, StoreRetry, create_engine_for
from agentloop.orchestration.store.retry import is_connection_error
from tests.services.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration


@pytest.fixture
def proxy(pg_engine: Engine) -> Iterator[TcpProxy]:
    url = pg_engine.url
    with TcpProxy(str(url.host), int(url.port or 5432)) as proxy:
        yield proxy


def _store(
    pg_engine: Engine, proxy: TcpProxy, seconds: float, waits: list[float] | None = None
) -> SqlRunStore:
    """The store through ``proxy``; each wait between its tries appended to ``waits``."""

    def sleep(seconds: float) -> None:
        if waits is not None:
            waits.append(seconds)
        time.sleep(seconds)

    url = proxy.url_of(pg_engine.url.render_as_string(hide_password=False))
    return SqlRunStore(create_engine_for(url), retry=StoreRetry(seconds, sleep=sleep))


def _back_after(proxy: TcpProxy, seconds: float) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(seconds), proxy.start()), daemon=True)
    thread.start()
    return thread


def test_a_store_call_rides_out_a_few_seconds_of_refused_connections(
    pg_engine: Engine, proxy: TcpProxy
) -> None:
    store = _store(pg_engine, proxy, seconds=30)
    run_id = f"retry-{uuid.uuid4().hex}"
    store.create_run(run_id=run_id, runnable="search", input={"q": 1})  # a pooled connection is open

    proxy.stop()  # the open connection is reset and new ones are refused
    back = _back_after(proxy, 3.0)
    started = time.monotonic()
    store.finish_run(run_id, status="succeeded", output={"answer": 42})
    took = time.monotonic() - started
    back.join()

    assert took >= 2.5
    record = store.get_run(run_id)
    assert record is not None and (record.status, record.output) == ("succeeded", {"answer": 42})
    store.engine.dispose()


def test_every_kind_of_call_rides_out_the_outage(pg_engine: Engine, proxy: TcpProxy) -> None:
    store = _store(pg_engine, proxy, seconds=30)
    run_id = f"retry-{uuid.uuid4().hex}"
    proxy.stop()
    back = _back_after(proxy, 1.5)
    store.create_run(run_id=run_id, runnable="search", input=None)  # never reached the server before
    back.join()
    proxy.stop()
    back = _back_after(proxy, 1.5)
    assert store.events(run_id) == []  # a read
    back.join()
    proxy.stop()
    back = _back_after(proxy, 1.5)
    store.append_events(run_id, [{"path": "", "status": "progress", "phase": "step"}])  # a write
    back.join()
    assert [event["phase"] for _, event in store.events(run_id)] == ["step"]
    store.engine.dispose()


def test_past_its_budget_a_store_call_says_the_store_is_unavailable(
    pg_engine: Engine, proxy: TcpProxy
) -> None:
    waits: list[float] = []
    store = _store(pg_engine, proxy, seconds=1.0, waits=waits)
    proxy.stop()
    with pytest.raises(StoreUnavailableError, match="unreachable for 1s \\(OperationalError") as raised:
        store.get_run("anything")
    # it waited between tries, and never past its budget (no wait that would end after it was taken)
    assert waits and sum(waits) < 1.0
    assert isinstance(raised.value, ConnectionError) and raised.value.seconds == 1.0
    assert isinstance(raised.value.__cause__, OperationalError)
    store.engine.dispose()


def test_a_budget_of_zero_tries_once(pg_engine: Engine, proxy: TcpProxy) -> None:
    store = _store(pg_engine, proxy, seconds=0)
    proxy.stop()
    with pytest.raises(StoreUnavailableError):
        store.get_run("anything")
    assert proxy.accepted == 0
    store.engine.dispose()


def _raised_by(engine: Engine, statement: str) -> Exception:
    with pytest.raises(Exception) as raised, engine.begin() as connection:
        connection.execute(text(statement))
    return raised.value


def test_integrity_and_data_errors_are_raised_at_once(pg_engine: Engine) -> None:
    integrity = _raised_by(pg_engine, "INSERT INTO runs (id) VALUES (NULL)")
    data = _raised_by(pg_engine, "SELECT 'not a number'::integer")
    missing = _raised_by(pg_engine, "SELECT * FROM no_such_table")
    assert isinstance(integrity, IntegrityError) and isinstance(data, DataError)
    for error in (integrity, data, missing):
        assert not is_connection_error(error)
        fail, calls = counting(error)
        with pytest.raises(type(error)):
            StoreRetry(30).call(fail)
        assert calls == [1]


def test_a_refused_connection_is_a_connection_error(proxy: TcpProxy, pg_engine: Engine) -> None:
    proxy.stop()
    engine = create_engine(proxy.url_of(pg_engine.url.render_as_string(hide_password=False)))
    refused = _raised_by(engine, "SELECT 1")
    engine.dispose()
    assert isinstance(refused, OperationalError) and is_connection_error(refused)


def test_on_sqlite_only_a_busy_file_is_tried_again(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'plain.sqlite3'}")
    missing = _raised_by(engine, "SELECT * FROM no_such_table")
    engine.dispose()
    assert isinstance(missing, OperationalError) and not is_connection_error(missing)
    locked = OperationalError("INSERT ...", {}, sqlite3.OperationalError("database is locked"))
    assert is_connection_error(locked)
    fail, calls = counting(locked)
    with pytest.raises(StoreUnavailableError):
        StoreRetry(0.3, initial=0.01).call(fail)
    assert len(calls) > 1


def test_a_connection_that_died_in_the_pool_is_replaced_at_once() -> None:
    # without a pre-ping, a pooled connection the server dropped fails its first statement: the
    # call runs again at once, without a backoff wait, on a new connection
    died = OperationalError("SELECT 1", {}, sqlite3.OperationalError("database is locked"))
    calls: list[int] = []
    waits: list[float] = []

    def once_dead() -> str:
        calls.append(len(calls))
        if len(calls) == 1:
            raise died
        return "answered"

    assert StoreRetry(30, initial=1.0, sleep=waits.append).call(once_dead) == "answered"
    assert len(calls) == 2 and waits == []  # tried again without a backoff wait (it would be >= 1 s)

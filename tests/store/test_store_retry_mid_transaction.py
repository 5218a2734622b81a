"""A pooled PostgreSQL connection that an outage left mid-transaction is a connection's fault: the
store call is tried again (on a new connection), while a real programming error is raised at once.

SQLAlchemy's pre-ping turns autocommit on for the connection it checks out; psycopg refuses when
the connection is not idle (``can't change 'autocommit' now: connection in transaction status
INTRANS``), which reaches the store as a ``ProgrammingError``.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from retry_support import counting
from sqlalchemy import Engine, text
from sqlalchemy.exc import ProgrammingError

from agentloop.orchestration.errors import StoreUnavailableError
from agentloop.orchestration.store import SqlRunStore, StoreRetry, create_engine_for
from agentloop.orchestration.store.retry import is_connection_error

LEFT_BUSY = "can't change 'autocommit' now: connection in transaction status INTRANS"


def _wrapped(driver_error: Exception) -> ProgrammingError:
    return ProgrammingError("SELECT 1", {}, driver_error)


def test_the_pre_pings_autocommit_refusal_is_tried_again_until_the_budget() -> None:
    for error in (_wrapped(psycopg.ProgrammingError(LEFT_BUSY)), psycopg.ProgrammingError(LEFT_BUSY)):
        assert is_connection_error(error)
        fail, calls = counting(error)
        with pytest.raises(StoreUnavailableError):
            StoreRetry(0.3, initial=0.01).call(fail)
        assert len(calls) > 1


def test_other_programming_errors_are_raised_at_once() -> None:
    in_a_context = "can't change 'autocommit' now: connection.transaction() context in progress"
    others = [
        _wrapped(psycopg.ProgrammingError(in_a_context)),
        _wrapped(psycopg.errors.SyntaxError('syntax error at or near "SELEC"')),
        _wrapped(psycopg.ProgrammingError(f"the query failed: {LEFT_BUSY}")),  # not psycopg's refusal
        ProgrammingError("SELECT 1", {}, ValueError(LEFT_BUSY)),  # not psycopg's at all
    ]
    for error in others:
        assert not is_connection_error(error), error
        fail, calls = counting(error)
        with pytest.raises(type(error)):
            StoreRetry(30).call(fail)
        assert calls == [1]


@pytest.mark.integration
def test_a_real_programming_error_from_postgresql_is_raised_at_once(pg_engine: Engine) -> None:
    with pytest.raises(ProgrammingError) as raised, pg_engine.connect() as connection:
        connection.execute(text("SELEC 1"))
    assert not is_connection_error(raised.value)


@pytest.mark.integration
def test_a_store_call_on_a_connection_left_mid_transaction_is_tried_again(pg_engine: Engine) -> None:
    url = pg_engine.url.render_as_string(hide_password=False)
    # The pool hands a connection back as it was returned: the state an outage can leave it in.
    engine = create_engine_for(url, pool_size=1, max_overflow=0, pool_reset_on_return=None)
    try:
        left = engine.raw_connection()
        left.cursor().execute("SELECT 1")  # a transaction begins and is never ended
        left.close()  # back to the pool, in transaction
        with pytest.raises(StoreUnavailableError) as raised:  # no retry budget: the one try's error
            SqlRunStore(engine, retry=StoreRetry(0)).get_run("anything")
        assert isinstance(raised.value.__cause__, ProgrammingError)
        assert str(raised.value.__cause__.orig) == LEFT_BUSY

        left = engine.raw_connection()
        left.cursor().execute("SELECT 1")
        left.close()
        store = SqlRunStore(engine, retry=StoreRetry(10, initial=0.01))
        run_id = f"mid-transaction-{uuid.uuid4().hex}"
        store.create_run(run_id=run_id, runnable="search", input={"q": 1})
        record = store.get_run(run_id)
        assert record is not None and record.status == "pending"
    finally:
        engine.dispose()

"""How many round trips a run-store call costs on PostgreSQL, read off libpq's protocol trace of
the pooled connection: a read, a checkpoint, a usage update, a batch of events, a loop's end
with its events, and a stage's end with the next stage's start are one statement each
(autocommit: no ``BEGIN`` before, no ``COMMIT`` or ``ROLLBACK`` after). A pooled connection an
outage left inside a transaction cannot be switched to autocommit: it is thrown away and the read
runs again on a new one."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg.pq import TransactionStatus
from sqlalchemy import create_engine

from agentloop.orchestration.errors import RunAlreadyEndedError, RunExistsError
from agentloop.orchestration.store import SqlRunStore, StoreRetry, open_store
from tests.services.postgres import private_database

pytestmark = pytest.mark.integration


@pytest.fixture
def store_url(pg_admin_url: str) -> Iterator[str]:
    with private_database(pg_admin_url) as url:
        open_store(url)[0].engine.dispose()  # migrated
        yield url


def _round_trips(trace: Path) -> list[str]:
    """What the client sent, one entry per round trip, from libpq's trace (tab-separated: time,
    ``F`` for the client, length, message): a simple ``Query`` (``BEGIN``, ``COMMIT``, ...) is one,
    an extended query is ``Parse`` ... ``Sync`` (named by its ``Parse``)."""
    sent = [line.split("\t") for line in trace.read_text().splitlines() if "\tF\t" in line]
    trips, pending = [], ""
    for fields in sent:
        message, text = fields[3], fields[4].strip() if len(fields) > 4 else ""
        if message == "Query":
            trips.append(text.strip('"'))
        elif message == "Parse":
            pending = text.removeprefix('"" "')  # unnamed statement, then its SQL
        elif message == "Sync":
            trips.append(pending)
    return trips


def test_a_read_or_a_one_statement_write_is_one_round_trip(store_url: str, tmp_path: Path) -> None:
    # open_store's engine: no pre-ping either
    store = open_store(store_url, migrate=False)[0]
    engine = store.engine
    try:
        run_id = uuid.uuid4().hex
        store.create_run(run_id=run_id, runnable="x", input={})
        trace = tmp_path / "libpq.trace"
        with engine.connect() as connection, trace.open("w") as out:
            connection.rollback()
            pgconn = connection.connection.dbapi_connection.pgconn  # type: ignore[union-attr]
            pgconn.trace(out.fileno())
            connection.close()  # back into the pool: the calls below use it, one at a time
            assert store.get_run(run_id) is not None
            assert not store.loop_record(run_id, "p").finished
            store.save_checkpoint(run_id, "p", 1, {"n": 1})
            assert store.add_usage(run_id, 3, 4) == (3, 4)
            store.append_events(run_id, [{"phase": "start"}, {"phase": "iteration"}])
            store.finish_loop(
                run_id, "p", {"r": 1}, events=[{"phase": "done"}], input_tokens=5, output_tokens=1
            )
            store.finish_loop(run_id, "q", {"r": 2}, output_tokens=2)  # usage without events
            # a pipeline's stage ends and the next one starts (joined stages): one statement too
            ended, (following, deliveries) = store.finish_loop_then_start(
                run_id, "s/0", {"r": 3}, "s/1", events=[{"phase": "done"}], input_tokens=1
            )
            pgconn.untrace()
        trips = _round_trips(trace)
        kinds = [trip.split()[0].upper() for trip in trips]
        assert kinds == ["SELECT", "SELECT", "INSERT", "UPDATE", "WITH", "WITH", "WITH", "WITH"], trips
        assert (ended, following.finished, deliveries) == ({"r": 3}, False, 1)
        assert [event["phase"] for _, event in store.events(run_id)] == ["start", "iteration", "done", "done"]
        assert store.loop_record(run_id, "p").result == {"r": 1}
        record = store.get_run(run_id)
        assert record is not None and (record.input_tokens, record.output_tokens) == (9, 7)
    finally:
        engine.dispose()


def test_a_runs_start_and_end_are_one_round_trip_each(store_url: str, tmp_path: Path) -> None:
    # a launch records its run and marks it running, a finalize ends it: each one autocommit
    # statement (no BEGIN, no COMMIT), as every run pays them, and a pipeline of trivial stages
    # pays them beside its stages' one statement each; the fallbacks (an id taken, a run started
    # before, or ended) stay correct
    store = open_store(store_url, migrate=False)[0]
    engine = store.engine
    try:
        run_id, ended_id = uuid.uuid4().hex, uuid.uuid4().hex
        store.create_run(run_id=ended_id, runnable="x", input={})
        store.finish_run(ended_id, status="failed", error={"type": "E", "message": "m"})
        trace = tmp_path / "libpq.trace"
        with engine.connect() as connection, trace.open("w") as out:
            connection.rollback()
            pgconn = connection.connection.dbapi_connection.pgconn  # type: ignore[union-attr]
            pgconn.trace(out.fileno())
            connection.close()
            created = store.create_run(run_id=run_id, runnable="x", input={"n": 1})
            assert store.get_run(run_id) == created  # the record as stored, from the INSERT
            assert store.mark_running(run_id)
            store.finish_run(run_id, status="succeeded", output={"r": 1})
            pgconn.untrace()
        kinds = [trip.split()[0].upper() for trip in _round_trips(trace)]
        assert kinds == ["INSERT", "SELECT", "UPDATE", "UPDATE"], _round_trips(trace)
        assert (created.id, created.status, created.input) == (run_id, "pending", {"n": 1})
        record = store.get_run(run_id)
        assert record is not None and (record.status, record.output) == ("succeeded", {"r": 1})
        assert record.started_at is not None
        with pytest.raises(RunExistsError) as taken:  # its id taken: the run stored before, as before
            store.create_run(run_id=run_id, runnable="y", input={})
        assert taken.value.record == record
        assert not store.mark_running(ended_id)  # ended: not marked, as before
        with pytest.raises(RunAlreadyEndedError):
            store.finish_run(ended_id, status="succeeded")
    finally:
        engine.dispose()


def test_a_pooled_connection_left_in_a_transaction_is_replaced(store_url: str) -> None:
    # an engine that hands connections back to its pool as they are, as one cut off mid-rollback
    engine = create_engine(store_url, pool_size=1, max_overflow=0, pool_reset_on_return=None)
    store = SqlRunStore(engine, retry=StoreRetry(5, initial=0.01))
    try:
        run_id = uuid.uuid4().hex
        store.create_run(run_id=run_id, runnable="x", input={})
        with engine.connect() as connection:
            raw = connection.connection.dbapi_connection
            raw.execute("SELECT 1")  # type: ignore[union-attr]  # a transaction left open
        assert raw.info.transaction_status == TransactionStatus.INTRANS  # type: ignore[union-attr]

        record = store.get_run(run_id)

        assert record is not None and record.id == run_id
        assert raw.closed  # type: ignore[union-attr]  # thrown away, not handed out again
    finally:
        engine.dispose()

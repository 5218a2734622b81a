"""open_store's engine pings no pooled connection before use (one round trip per store call, not
two): a pooled connection PostgreSQL killed fails its first statement, is replaced, and the call of
the run store, the tool store or the wait store runs again and succeeds."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine

from agentloop.actions.human import Question, QuestionKind
from agentloop.orchestration.store import SqlRunStore, SqlToolStore, StoreRetry, open_store
from agentloop.orchestration.store.waits import SqlWaitStore, Wait, wait_store_for
from tests.services.postgres import private_database

pytestmark = pytest.mark.integration

PAYLOAD = {"name": "answer", "description": "Answer.", "parameters": {"type": "object", "properties": {}}}


@pytest.fixture
def pg_stores(pg_admin_url: str) -> Iterator[tuple[SqlRunStore, SqlToolStore, str]]:
    with private_database(pg_admin_url) as url:
        run_store, tool_store = open_store(url, retry=StoreRetry(10, initial=0.01))
        yield run_store, tool_store, pg_admin_url
        run_store.engine.dispose()


def kill_pooled_connections(admin_url: str, engine: Engine) -> int:
    """Terminate every server process of ``engine``'s database (its pool's idle connections)."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            killed = connection.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": engine.url.database},
            ).scalar_one()
    finally:
        admin.dispose()
    return int(killed)


def statements(engine: Engine) -> tuple[list[str], Callable[[], None]]:
    seen: list[str] = []

    def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement.split()[0].upper())

    event.listen(engine, "before_cursor_execute", note)
    return seen, lambda: event.remove(engine, "before_cursor_execute", note)


def test_a_store_call_is_one_statement_no_ping(pg_stores: tuple[SqlRunStore, SqlToolStore, str]) -> None:
    run_store, _, _ = pg_stores
    run_store.create_run(run_id="r1", runnable="x", input={})
    seen, stop = statements(run_store.engine)
    try:
        run_store.get_run("r1")
    finally:
        stop()
    assert seen == ["SELECT"]
    assert run_store.engine.pool._pre_ping is False  # type: ignore[attr-defined]


def test_every_store_rides_out_a_pooled_connection_the_server_killed(
    pg_stores: tuple[SqlRunStore, SqlToolStore, str],
) -> None:
    run_store, tool_store, admin_url = pg_stores
    waits = wait_store_for(run_store)
    assert isinstance(waits, SqlWaitStore)
    run_id = f"killed-{uuid.uuid4().hex[:8]}"
    run_store.create_run(run_id=run_id, runnable="x", input={})
    tool_store.put("answer", PAYLOAD)

    assert kill_pooled_connections(admin_url, run_store.engine) >= 1
    record = run_store.get_run(run_id)
    assert record is not None and record.status == "pending"

    assert kill_pooled_connections(admin_url, run_store.engine) >= 1
    assert tool_store.get_payload("answer") == PAYLOAD

    assert kill_pooled_connections(admin_url, run_store.engine) >= 1
    question = Question(prompt="Go on?", kind=QuestionKind.APPROVAL, key="q1")
    wait = Wait(run_id=run_id, path="", question=question, message={})
    assert waits.record(wait) is True
    assert waits.get(run_id, "", "q1") is not None


def test_a_packs_start_is_one_statement_whose_text_is_the_same_at_any_size(
    pg_stores: tuple[SqlRunStore, SqlToolStore, str],
) -> None:
    """``start_loops`` of a pack (200 paths) was a multi-row ``VALUES`` of 1,000 parameters, a new
    text psycopg parsed again for every pack (past its cache's 50 parameters): now one text."""
    run_store, _, _ = pg_stores
    sent: list[str] = []

    def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(run_store.engine, "before_cursor_execute", note)
    try:
        for delivery, size in enumerate((1, 5, 200), start=1):
            started = run_store.start_loops("r1", [f"b/{index}" for index in range(size)])
            assert len(started) == size and started[0][1] == delivery and started[-1][1] == 1
    finally:
        event.remove(run_store.engine, "before_cursor_execute", note)
    assert len(sent) == 3 and len(set(sent)) == 1, sent

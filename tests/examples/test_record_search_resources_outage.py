"""The record-search example's resources ride out a database that refuses connections when a
process first opens them (the fault suite's "PostgreSQL refusing 5 s": a pool process's first
task built its context during the outage and its run failed). Ordered by events, not timed: the
database comes back only once the set-up has met the refusal and is waiting to try again."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from agentloop.examples.record_search import open_resources
from tests.services.postgres import postgres_url_fixture
from tests.services.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration

CEILING = 60.0


database_url = postgres_url_fixture(scope="function")


class Retries(logging.Handler):
    """Set once the store's retry logs that it waits to try again."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.set()


def test_resources_opened_while_the_database_refuses_wait_for_it(database_url: str) -> None:
    retries = Retries()
    logger = logging.getLogger("agentloop.orchestration.store.retry")
    logger.addHandler(retries)
    outcome: dict[str, Any] = {}

    def open_them() -> None:
        try:
            outcome["resources"] = open_resources(proxy.url_of(database_url))
        except Exception as error:  # the test's verdict, below
            outcome["error"] = error

    try:
        target = make_url(database_url)
        with TcpProxy(target.host or "127.0.0.1", target.port or 5432) as proxy:
            opener = threading.Thread(target=open_them)
            with proxy.refusing():
                opener.start()
                # the database comes back only once the set-up met the refusal: it tried again, or
                # (before the fix) it already failed
                while not retries.seen.wait(0.05):
                    assert opener.is_alive(), f"the set-up gave up: {outcome.get('error')!r}"
            opener.join(CEILING)
            assert not opener.is_alive()
    finally:
        logger.removeHandler(retries)
    assert "error" not in outcome, outcome["error"]
    resources = outcome["resources"]
    try:
        assert sum(resources.record_counts.values()) > 0
    finally:
        resources.dispose()

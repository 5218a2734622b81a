"""Real workers on a private Redis, their run store a private PostgreSQL database behind a TCP
proxy the test stops and starts; the test reads the store directly (never through the proxy).

Without PostgreSQL or ``redis-server`` the tests skip (``tests/ci_policy.py`` fails a skip under ``CI=true``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest
from durability_support import DurabilityRig, running_rig

from agentloop.orchestration.store import open_store
from tests.services.postgres import (
    PostgresUnavailableError,
    postgres_server,
    private_database,
    skip_or_fail,
)
from tests.services.redis_server import ServiceUnavailable, private_redis_server


@pytest.fixture(scope="session")
def pg_database_url() -> Iterator[str]:
    """A private, migrated PostgreSQL database for this session."""
    with ExitStack() as stack:
        try:
            admin = stack.enter_context(postgres_server())
        except PostgresUnavailableError as error:
            skip_or_fail(str(error))
        url = stack.enter_context(private_database(admin))
        store, _ = open_store(url)
        store.engine.dispose()
        yield url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with ExitStack() as stack:
        try:
            server = stack.enter_context(private_redis_server())
        except ServiceUnavailable as unavailable:
            pytest.skip(unavailable.reason)  # a failure under CI=true (tests/ci_policy.py)
        yield server.url


@pytest.fixture(scope="module")
def durability_rig(pg_database_url: str, redis_url: str) -> Iterator[DurabilityRig]:
    """A worker with the default store retries (60 s)."""
    with running_rig(pg_database_url, redis_url, retry_seconds=60) as running:
        yield running


@pytest.fixture
def outage(durability_rig: DurabilityRig) -> Callable[[float], None]:
    """``outage(seconds)``: PostgreSQL refuses the worker's connections (and resets open ones)."""

    def down_for(seconds: float) -> None:
        assert durability_rig.proxy is not None
        with durability_rig.proxy.refusing():
            time.sleep(seconds)

    return down_for

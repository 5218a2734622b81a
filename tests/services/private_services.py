"""A private Redis and a SQLite run store for one test module's worker, the pair most worker
fixtures start from (``tests/*/conftest.py``, ``tests/*/test_*_on_a_worker.py``)."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentloop.orchestration.store import SqlRunStore, SqlToolStore, open_store
from tests.services.redis_server import RedisServer, ServiceUnavailable, private_redis_server


@dataclass(frozen=True)
class RedisAndStore:
    redis: RedisServer
    database_url: str
    store: SqlRunStore
    tools: SqlToolStore


def redis_and_store(stack: ExitStack, folder: Path, *, file: str = "runs.sqlite3") -> RedisAndStore:
    """A private Redis (the test is skipped where there is no ``redis-server``) and a SQLite run
    store at ``folder / file``, both for ``stack``'s length."""
    try:
        redis = stack.enter_context(private_redis_server())
    except ServiceUnavailable as unavailable:
        pytest.skip(unavailable.reason)
    database_url = f"sqlite:///{folder / file}"
    store, tools = open_store(database_url)
    stack.callback(store.engine.dispose)
    return RedisAndStore(redis=redis, database_url=database_url, store=store, tools=tools)

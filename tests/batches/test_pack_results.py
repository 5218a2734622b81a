"""A batch pack's runs' results go to a Redis result backend together (``pack_results.py``): read
back by their run ids as ``store_result`` leaves them, a stored ``SUCCESS`` standing, in one
``MGET`` and one pipeline where ``store_result`` makes a ``GET`` and a ``SET`` for each (counted
by the server's own command statistics)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery, states

from agentloop.orchestration.celery_adapter.pack_results import store_results
from tests.services.redis_server import RedisServer
from tests.services.worker_environment import redis_fixture

server = redis_fixture("module")


@pytest.fixture
def app(server: RedisServer) -> Iterator[Celery]:
    app = Celery("pack-results", broker="memory://", backend=server.url)
    client = redis.Redis.from_url(server.url)
    client.flushdb()
    client.config_resetstat()
    client.close()
    try:
        yield app
    finally:
        app.close()


def _commands(server: RedisServer) -> dict[str, int]:
    client = redis.Redis.from_url(server.url)
    try:
        stats: dict[str, Any] = client.info("commandstats")
    finally:
        client.close()
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


def test_results_are_written_together_as_store_result_writes_them(app: Celery, server: RedisServer) -> None:
    app.backend.store_result("r-kept", 1, states.SUCCESS)  # a twin's result, written before
    before = _commands(server)
    results = [(f"r-{index}", {"n": index}, states.SUCCESS) for index in range(50)]
    results += [("r-failed", ValueError("boom"), states.FAILURE), ("r-kept", 2, states.FAILURE)]

    store_results(app.backend, results)

    used = {name: calls - before.get(name, 0) for name, calls in _commands(server).items()}
    assert used.get("mget") == 1 and used.get("get", 0) == 0, used
    assert used.get("setex", 0) + used.get("set", 0) == 51 and used.get("multi", 0) <= 1, used
    assert all(app.AsyncResult(f"r-{index}").get(timeout=5) == {"n": index} for index in range(50))
    failed = app.AsyncResult("r-failed")
    assert failed.state == states.FAILURE and isinstance(failed.result, ValueError)
    assert app.AsyncResult("r-kept").get(timeout=5) == 1  # a first success stands


def test_a_redelivered_packs_ended_runs_get_a_result_only_where_none_is_stored(app: Celery) -> None:
    app.backend.store_result("r-failed", ValueError("first"), states.FAILURE)  # the first delivery's

    store_results(
        app.backend,
        [("r-failed", RuntimeError("again"), states.FAILURE), ("r-lost", 7, states.SUCCESS)],
        missing_only={"r-failed", "r-lost"},
    )

    failed = app.AsyncResult("r-failed")
    assert failed.state == states.FAILURE and str(failed.result) == "first"  # kept as it was
    assert app.AsyncResult("r-lost").get(timeout=5) == 7  # its first delivery died before writing it

"""A worker that expands composites stays subscribed to no result channel.

A composite's chord is sent from inside a worker task (``Task.replace``). Celery's
group then registers every branch's result with the Redis result backend of the
pool process, which subscribes to its pub/sub channel and, nobody in a worker
ever waiting on it, never unsubscribes (celery/celery#4824, #5320): channels and
memory grow with every composite run. Here a real prefork worker on a private
Redis runs many composites, and Redis is asked who is still subscribed.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import redis

from agentloop import CeleryAgentRunner
from orchestration.celery_adapter.app import create_app
from orchestration.registry import RunnableRegistry
from orchestration.store import open_store
from orchestration.testing.servers.redis_server import ServiceUnavailable, private_redis_server
from orchestration.testing.servers.worker import run_worker_process

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RUNS = 12
WIDTH = 4


@pytest.fixture
def one_pool_process(tmp_path: Path, parity_registry: RunnableRegistry) -> Iterator[tuple[Any, Any, str]]:
    """A prefork worker of one pool process on a Redis of its own; the client app and the store."""
    with ExitStack() as stack:
        try:
            server = stack.enter_context(private_redis_server())
        except ServiceUnavailable as unavailable:
            pytest.skip(unavailable.reason)
        database_url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
        store, _ = open_store(database_url)
        stack.callback(store.engine.dispose)
        env = {"DATABASE_URL": database_url, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
        stack.enter_context(
            run_worker_process(
                broker_url=server.url,
                result_backend=server.url,
                imports=["parity_workflows"],
                env=env,
                concurrency=1,
            )
        )
        urls = {"broker_url": server.url, "result_backend": server.url}
        app = create_app(registry=parity_registry, store=store, overrides=urls)
        stack.callback(app.close)
        yield app, store, server.url


def channels_of_others(app: Any, url: str) -> set[str]:
    """The result channels someone other than this test process is subscribed to."""
    gc.collect()
    subscribed = app.backend.result_consumer.subscribed_to
    ours = {key.decode() if isinstance(key, bytes) else key for key in subscribed}
    with redis.Redis.from_url(url) as client:
        channels = {name.decode() for name in client.pubsub_channels()}
    return channels - ours


def test_a_worker_expanding_composites_keeps_no_result_channel(one_pool_process: tuple[Any, ...]) -> None:
    app, store, url = one_pool_process
    runner = CeleryAgentRunner.create(runnable="parity.fan", app=app, store=store)
    for index in range(RUNS):
        handle = runner.request_sync(input=list(range(index, index + WIDTH)))
        assert handle.wait_sync(timeout=60)["keys"] == [str(branch) for branch in range(WIDTH)]
    time.sleep(0.5)  # the last merge's own results are published
    leaked = channels_of_others(app, url)
    # before the fix: one channel per branch of every run (RUNS * WIDTH = 48)
    assert len(leaked) <= 1, sorted(leaked)[:10]

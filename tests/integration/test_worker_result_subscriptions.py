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
from typing import Any

import pytest
import redis

from agentloop import CeleryAgentRunner

pytestmark = pytest.mark.integration

RUNS = 12
WIDTH = 4


def channels_of_others(app: Any, url: str) -> set[str]:
    """The result channels someone other than this test process is subscribed to."""
    gc.collect()
    subscribed = app.backend.result_consumer.subscribed_to
    ours = {key.decode() if isinstance(key, bytes) else key for key in subscribed}
    with redis.Redis.from_url(url) as client:
        channels = {name.decode() for name in client.pubsub_channels()}
    return channels - ours


def test_a_worker_expanding_composites_keeps_no_result_channel(lone_worker: Any) -> None:
    app, store, url = lone_worker.app, lone_worker.store, lone_worker.redis_url
    runner = CeleryAgentRunner.create(runnable="parity.fan", app=app, store=store)
    for index in range(RUNS):
        handle = runner.request_sync(input=list(range(index, index + WIDTH)))
        assert handle.wait_sync(timeout=60)["keys"] == [str(branch) for branch in range(WIDTH)]
    time.sleep(0.5)  # the last merge's own results are published
    leaked = channels_of_others(app, url)
    # before the fix: one channel per branch of every run (RUNS * WIDTH = 48)
    assert len(leaked) <= 1, sorted(leaked)[:10]

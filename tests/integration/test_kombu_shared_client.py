"""The worker patch ``kombu-redis-shared-client`` on a real Redis: a kombu Redis channel builds one
redis-py client for all it publishes (kombu alone builds one per message), every message arrives,
threads may publish through the channel at once, and after a Redis restart or a pool kombu replaced,
publishing goes on.

The patch is applied to a subclass of kombu's channel here: the test process stays a client, whose
kombu is never changed (``tests/operations/test_ops_worker_patches.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kombu import Connection, Exchange, Producer, Queue
from kombu.transport import redis as kombu_redis

from agentloop.orchestration.celery_adapter.patches import kombu_client_is_shared, share_channel_client
from tests.services.redis_server import RedisServer

pytestmark = pytest.mark.integration


class CountingChannel(kombu_redis.Channel):
    """kombu's Redis channel, counting the redis-py clients it builds for commands (its consuming
    client, built once with the channel, is not counted)."""

    built = 0
    # kombu's own conn_or_acquire, even when an in-process worker of an earlier test patched kombu
    # (the patch keeps kombu's method as its __wrapped__; kombu's own __wrapped__ is the bare generator)
    conn_or_acquire = (
        kombu_redis.Channel.conn_or_acquire.__wrapped__  # type: ignore[attr-defined]
        if kombu_client_is_shared()
        else kombu_redis.Channel.conn_or_acquire
    )

    def _create_client(self, asynchronous: bool = False) -> Any:
        if not asynchronous:
            type(self).built += 1
        return super()._create_client(asynchronous=asynchronous)


class SharedChannel(CountingChannel):
    built = 0


share_channel_client(SharedChannel)


def _transport(channel: type) -> type:
    return type("Transport", (kombu_redis.Transport,), {"Channel": channel})


@pytest.fixture
def queue() -> Queue:
    return Queue("shared-client", Exchange("shared-client", type="direct"), routing_key="shared-client")


@pytest.fixture
def shared(restartable_redis: RedisServer, queue: Queue) -> Iterator[tuple[Any, Producer]]:
    SharedChannel.built = 0
    connection = Connection(restartable_redis.url, transport=_transport(SharedChannel))
    channel = connection.default_channel
    queue(channel).declare()
    yield channel, Producer(channel, exchange=queue.exchange, routing_key="shared-client")
    connection.release()


def _queued(channel: Any) -> int:
    return int(channel._size("shared-client"))


def test_kombu_alone_builds_a_client_per_message(restartable_redis: RedisServer, queue: Queue) -> None:
    with Connection(restartable_redis.url, transport=_transport(CountingChannel)) as connection:
        channel = connection.default_channel
        queue(channel).declare()
        CountingChannel.built = 0
        producer = Producer(channel, exchange=queue.exchange, routing_key="shared-client")
        for n in range(50):
            producer.publish({"n": n})
        assert CountingChannel.built >= 50  # what the patch is for


def test_a_patched_channel_builds_one_client_and_every_message_arrives(shared: tuple[Any, Producer]) -> None:
    channel, producer = shared
    for n in range(300):
        producer.publish({"n": n})
    assert SharedChannel.built == 1
    assert _queued(channel) == 300


def test_threads_publish_through_one_channel_at_once(shared: tuple[Any, Producer]) -> None:
    channel, _ = shared
    exchange = "shared-client"

    def publish(n: int) -> None:
        channel.basic_publish(channel.prepare_message(str(n)), exchange=exchange, routing_key=exchange)

    with ThreadPoolExecutor(max_workers=8) as pool:  # within the pool's 10 connections (kombu's default)
        list(pool.map(publish, range(800)))
    assert _queued(channel) == 800
    assert SharedChannel.built == 1


def test_publishing_goes_on_after_a_redis_restart_and_on_a_pool_kombu_replaced(
    shared: tuple[Any, Producer], restartable_redis: RedisServer, queue: Queue
) -> None:
    channel, producer = shared
    producer.publish({"n": "before"})
    restartable_redis.restart()  # without persistence: the queue and its binding are gone
    # a new queue on the exchange: its binding is written through the shared client, whose pool
    # connects again (kombu remembers the old binding and would not write it again)
    Queue("after-restart", queue.exchange, routing_key="shared-client")(channel).declare()
    producer.publish({"n": "after the restart"})
    assert SharedChannel.built == 1
    assert channel._size("after-restart") == 1

    channel._disconnect_pools()  # what kombu does with a channel's pools when its connection goes
    producer.publish({"n": "on a new pool"})
    assert SharedChannel.built == 2  # a client of the new pool
    assert channel.__dict__["_agentloop_shared_client"].connection_pool is channel.pool
    assert channel._size("after-restart") == 2

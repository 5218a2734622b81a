"""A message taken from a Redis queue is never only in a worker's memory (``redis_delivery.py``).

The window the fault suite found (``worker SIGKILLed``, ``Redis restarted``: a record-search run
whose branch message vanished): kombu pops a message with ``BRPOP`` and writes it to the
``unacked`` hash in a second command, so a worker that dies between the two, or a Redis that
stops before the reply left, loses it. Here the worker "dies" the moment the server has run its
poll command: the connection is closed before the reply is read. With the patch the message is
held in ``unacked`` and the visibility timeout brings it back; with kombu alone it is gone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection, Exchange, Queue

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.redis_delivery import (
    DOORBELL_TOKENS,
    OPTION,
    doorbell_key,
    install_atomic_delivery,
)
from tests.services.redis_server import RedisServer
from tests.services.worker_environment import redis_fixture

pytestmark = pytest.mark.integration

QUEUE = "atomic-delivery"


#: The queue every test sends to and consumes from.
KOMBU_QUEUE = Queue(QUEUE, Exchange(QUEUE, type="direct"), routing_key=QUEUE)

redis_server = redis_fixture("module")


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    direct = redis.Redis.from_url(redis_server.url)
    direct.flushdb()
    yield direct
    direct.close()


def _connection(redis_server: RedisServer, *, atomic: bool) -> Connection:
    assert install_atomic_delivery(), "the patch must apply to the kombu this project installs"
    return Connection(redis_server.url, transport_options={OPTION: atomic, "visibility_timeout": 1})


def _send(connection: Connection, body: dict[str, Any]) -> None:
    with connection.Producer() as producer:
        producer.publish(body, exchange=KOMBU_QUEUE.exchange, routing_key=QUEUE, declare=[KOMBU_QUEUE])


def _poll_then_die(connection: Connection, client: redis.Redis) -> None:
    """Start consuming, send the channel's poll command, and close the connection once the server
    has taken the message off the queue, before the reply is read (a worker killed right there)."""
    channel: Any = connection.default_channel
    channel.basic_consume(QUEUE, False, lambda message: None, "dies")
    channel.connection.cycle._register_BRPOP(channel)  # what the worker's poller does: the poll is sent
    deadline = time.monotonic() + 10
    while client.llen(QUEUE) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client.llen(QUEUE) == 0, "the server never took the message"
    channel.client.connection.disconnect()


def _acknowledged_into(received: list[Any]) -> list[Any]:
    """A consumer's callbacks: each body kept in ``received``, its message acknowledged."""
    return [lambda body, message: (received.append(body), message.ack())]


def _held(client: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw)[0] for raw in client.hvals("unacked")]


def test_a_message_taken_by_a_worker_that_dies_before_the_reply_is_held_and_comes_back(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    sender = _connection(redis_server, atomic=True)
    _send(sender, {"n": 1})
    assert client.llen(doorbell_key(QUEUE)) == 1  # the sender rang, in the message's transaction
    worker = _connection(redis_server, atomic=True)
    _poll_then_die(worker, client)
    held = _held(client)
    assert [message["properties"]["delivery_info"]["routing_key"] for message in held] == [QUEUE]
    assert client.zcard("unacked_index") == 1
    # the visibility timeout (1 s here) passes; another worker's sweep puts it back on its queue
    other: Any = _connection(redis_server, atomic=True).default_channel
    deadline = time.monotonic() + 10
    while not client.llen(QUEUE) and time.monotonic() < deadline:
        other.qos.restore_visible(num=10, interval=1)
        time.sleep(0.1)
    assert client.llen(QUEUE) == 1 and client.hlen("unacked") == 0
    for connection in (sender, worker, other.connection.client):
        connection.release()


def test_kombu_alone_loses_that_message(redis_server: RedisServer, client: redis.Redis) -> None:
    """The defect itself (celery/kombu#305): should kombu fix it, this test says the patch may go."""
    sender = _connection(redis_server, atomic=False)
    _send(sender, {"n": 1})
    worker = _connection(redis_server, atomic=False)
    _poll_then_die(worker, client)
    assert client.llen(QUEUE) == 0 and client.hlen("unacked") == 0  # nowhere: lost
    sender.release()
    worker.release()


def test_a_waiting_worker_is_woken_by_the_doorbell_and_a_plain_sender_is_still_served(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    received: list[Any] = []
    worker = _connection(redis_server, atomic=True)
    with worker.Consumer(
        [KOMBU_QUEUE], callbacks=[lambda body, message: (received.append(body), message.ack())]
    ):
        with pytest.raises(TimeoutError):  # empty: the channel looked, and now waits on the doorbell
            worker.drain_events(timeout=0.5)
        _send(_connection(redis_server, atomic=True), {"n": 1})
        while len(received) < 1:
            worker.drain_events(timeout=5)
        _send(_connection(redis_server, atomic=False), {"n": 2})  # another service's plain Celery: no token
        while len(received) < 2:
            worker.drain_events(timeout=5)
    assert received == [{"n": 1}, {"n": 2}]
    assert client.hlen("unacked") == 0  # both acknowledged
    worker.release()


def test_the_doorbell_keeps_a_bounded_number_of_tokens(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    sender = _connection(redis_server, atomic=True)
    for n in range(DOORBELL_TOKENS + 20):
        _send(sender, {"n": n})
    assert client.llen(QUEUE) == DOORBELL_TOKENS + 20
    assert client.llen(doorbell_key(QUEUE)) == DOORBELL_TOKENS
    sender.release()


def test_apps_turn_it_on_for_redis_only() -> None:
    redis_app = create_app(overrides={"broker_url": "redis://127.0.0.1:1/0"})
    amqp_app = create_app(overrides={"broker_url": "amqp://guest:guest@127.0.0.1:1//"})
    assert redis_app.conf.broker_transport_options[OPTION] is True
    assert OPTION not in amqp_app.conf.broker_transport_options
    redis_app.close()
    amqp_app.close()


def test_a_queue_consumed_without_acknowledgements_holds_nothing(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    """Celery's control replies are consumed with ``no_ack``: kombu never acknowledges them, so a
    held copy would come back after every visibility timeout, for ever."""
    received: list[Any] = []
    worker = _connection(redis_server, atomic=True)
    with worker.Consumer([KOMBU_QUEUE], callbacks=[lambda body, message: received.append(body)], no_ack=True):
        _send(_connection(redis_server, atomic=True), {"n": 1})
        while not received:
            worker.drain_events(timeout=5)
    assert received == [{"n": 1}]
    assert client.hlen("unacked") == 0 and client.zcard("unacked_index") == 0
    worker.release()


def test_the_script_holds_any_layout_of_kombu_json_and_hands_over_what_is_not(client: redis.Redis) -> None:
    """kombu writes ``properties`` last, where the script reads them without decoding the body; a
    message written another way is decoded whole; one that is not JSON is handed over unheld, as
    ``BRPOP`` would, for the worker's edge to dead-letter."""
    from agentloop.orchestration.celery_adapter.redis_delivery import POP_AND_HOLD

    def pop() -> list[bytes]:
        return list(client.eval(POP_AND_HOLD, 3, QUEUE, "unacked", "unacked_index", "1.5", "1"))

    info = {"exchange": "", "routing_key": QUEUE}
    kombu_layout = {"body": "x" * 10_000, "headers": {"properties": {"a": 1}}, "properties": {}}
    kombu_layout["properties"] = {"delivery_info": info, "delivery_tag": "tag-last"}
    other_layout = {"properties": {"delivery_info": info, "delivery_tag": "tag-first"}, "body": "x"}
    client.lpush(QUEUE, json.dumps(kombu_layout))
    client.lpush(QUEUE, json.dumps(other_layout, separators=(",", ":")))
    client.lpush(QUEUE, b"plain text")
    assert pop()[2:] == [b"tag-last"]
    assert pop()[2:] == [b"tag-first"]
    assert pop() == [QUEUE.encode(), b"plain text"]
    held = {tag.decode(): json.loads(raw) for tag, raw in client.hgetall("unacked").items()}
    assert set(held) == {"tag-last", "tag-first"}
    assert held["tag-last"] == [kombu_layout, "", QUEUE]  # as kombu's own QoS.append writes it
    assert client.zscore("unacked_index", "tag-first") == 1.5


def test_a_redis_that_refuses_scripts_is_served_as_kombu_serves_it(
    redis_server: RedisServer, client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """An ACL without ``EVAL`` (as some managed Redis services set): the first poll's script is
    refused, nothing is popped, and the channel takes its messages with kombu's ``BRPOP``."""
    client.acl_setuser(
        "noscripts",
        enabled=True,
        nopass=True,
        keys=["*"],
        channels=["*"],
        commands=["+@all", "-eval", "-evalsha"],
    )
    url = redis_server.url.replace("redis://", "redis://noscripts:any@", 1)
    assert install_atomic_delivery()
    worker = Connection(url, transport_options={OPTION: True})
    received: list[Any] = []
    try:
        with worker.Consumer([KOMBU_QUEUE], callbacks=_acknowledged_into(received)):
            _send(Connection(url, transport_options={OPTION: True}), {"n": 1})
            while not received:
                worker.drain_events(timeout=5)
    finally:
        worker.release()
        client.acl_deluser("noscripts")
    assert received == [{"n": 1}]
    assert "refused the delivery script" in caplog.text

"""The broker a fault run attacks: a private Redis (broker and results) or a private RabbitMQ node.

``python -m tests.faults --broker rabbitmq`` runs every scenario on a RabbitMQ node of its own
(:func:`~tests.services.rabbitmq_node.private_rabbitmq_node`: the machine's RabbitMQ is never
restarted), results still in a private Redis (RabbitMQ's ``rpc://`` keeps no state for chords).
The worker reaches the node through a :class:`~tests.services.tcp_proxy.TcpProxy`, so a scenario
can drop its connections; clients and the test process reach it directly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from typing import Any, Literal

import redis
from celery import Celery

from agentloop.orchestration.celery_adapter.config import (
    batch_queue_name,
    dead_letter_queue_name,
    queue_config,
)
from agentloop.orchestration.settings import Settings
from tests.services.rabbitmq_node import RabbitMQNode, private_rabbitmq_node
from tests.services.redis_server import RedisServer
from tests.services.tcp_proxy import TcpProxy

BrokerKind = Literal["redis", "rabbitmq"]
BROKERS: tuple[BrokerKind, ...] = ("redis", "rabbitmq")


@dataclass(kw_only=True)
class BrokerUnderTest:
    """What the scenarios need of the broker: where each side connects, a restart, a purge, and
    whether anything is still queued or unacknowledged."""

    kind: BrokerKind
    #: The URL clients and the test process use.
    url: str
    #: The URL workers use (through the proxy on RabbitMQ).
    worker_url: str
    queue: str
    redis_server: RedisServer
    node: RabbitMQNode | None = None
    proxy: TcpProxy | None = None

    @property
    def label(self) -> str:
        return "Redis" if self.kind == "redis" else "RabbitMQ"

    def restart(self) -> None:
        """Stop the broker and start it again, with its data (append-only Redis; RabbitMQ's disk)."""
        if self.node is not None:
            self.node.restart()
        else:
            self.redis_server.restart()

    def drop_connections(self, seconds: float = 1.0) -> None:
        """Reset every worker connection to the broker and refuse new ones for ``seconds``."""
        if self.proxy is None:
            raise RuntimeError("only the RabbitMQ rig puts a proxy between the worker and its broker")
        with self.proxy.refusing():
            time.sleep(seconds)

    def configure_foreign(self, app: Celery) -> None:
        """A plain Celery app (another service) that sends to the workers' queue: on RabbitMQ it
        must declare the queues as the workers do (RabbitMQ refuses other arguments)."""
        app.conf.update(task_default_queue=self.queue, result_backend_always_retry=True)
        if self.kind == "rabbitmq":
            app.conf.update(queue_config(self.url, self.queue, Settings().delivery_limit))

    def _queues(self) -> tuple[str, ...]:
        return (self.queue, batch_queue_name(self.queue))

    def purge(self) -> None:
        """Drop every queued message (and on Redis the unacknowledged ones; on RabbitMQ those come
        back to the queue when their worker's connection closes, before this is called)."""
        if self.kind == "redis":
            client = redis.Redis.from_url(self.redis_server.url)
            try:
                names = list(client.scan_iter(f"{self.queue}*"))
                client.delete(*names, "unacked", "unacked_index", "unacked_mutex")
            finally:
                client.close()
            return
        with self._connection() as connection:
            for name in self._queues():
                with connection.channel() as channel:
                    channel.queue_purge(name)

    def idle(self) -> bool:
        """Nothing queued, nothing delivered and not yet acknowledged (RabbitMQ: nothing ready;
        AMQP does not tell the unacknowledged, which settle's run records cover)."""
        if self.kind == "redis":
            client = redis.Redis.from_url(self.redis_server.url)
            try:
                return not client.llen(self.queue) and not client.hlen("unacked")
            finally:
                client.close()
        with self._connection() as connection:
            return all(self._depth(connection, name) == 0 for name in self._queues())

    def dead_letters(self) -> int:
        """Messages RabbitMQ dead-lettered past their delivery limit (0 on Redis)."""
        if self.kind == "redis":
            return 0
        with self._connection() as connection:
            return self._depth(connection, dead_letter_queue_name(self.queue))

    @staticmethod
    def _depth(connection: Any, name: str) -> int:
        channel = connection.channel()
        try:
            return int(channel.queue_declare(queue=name, passive=True).message_count)
        except Exception:  # not declared yet (the broker closed the channel): nothing in it
            return 0
        finally:
            with suppress(Exception):
                channel.close()

    def _connection(self) -> Any:
        from kombu.connection import Connection

        return Connection(self.url, connect_timeout=5)


@contextmanager
def broker_under_test(kind: BrokerKind, redis_server: RedisServer, queue: str) -> Iterator[BrokerUnderTest]:
    """The broker of ``kind`` for the ``with`` block (``redis_server`` holds the results either way)."""
    if kind == "redis":
        yield BrokerUnderTest(
            kind=kind,
            url=redis_server.url,
            worker_url=redis_server.url,
            queue=queue,
            redis_server=redis_server,
        )
        return
    with ExitStack() as stack:
        node = stack.enter_context(private_rabbitmq_node())
        proxy = stack.enter_context(TcpProxy("127.0.0.1", node.port))
        yield BrokerUnderTest(
            kind=kind,
            url=node.url,
            worker_url=f"amqp://guest:guest@127.0.0.1:{proxy.port}//",
            queue=queue,
            redis_server=redis_server,
            node=node,
            proxy=proxy,
        )

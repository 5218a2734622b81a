"""A message the broker handed over is recorded or dead-lettered, never dropped (issue 33, items 5
and 10e), on real workers:

* a body with no headers (plain text) has nothing to record it under: it is dead-lettered to
  ``<queue>.dead``, on Redis (a list the worker pushes it to) and on RabbitMQ (rejected without
  requeue: the queue's ``x-dead-letter-routing-key``);
* on RabbitMQ, a message at its delivery limit whose run store is away for longer than the
  recorder's patience (``RECORD_ATTEMPTS`` tries of ``AGENTLOOP_STORE_RETRY_SECONDS``, 1 s here)
  is dead-lettered, not acknowledged and forgotten.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import redis as redis_client
from durability_support import running_rig

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.wire import LAUNCH
from tests.services.rabbitmq import RabbitMQTarget, private_rabbitmq
from tests.services.redis_server import ServiceUnavailable, private_redis_server
from tests.services.worker import run_worker_process

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def rabbit() -> Iterator[RabbitMQTarget]:
    with ExitStack() as stack:
        try:
            target = stack.enter_context(private_rabbitmq())
        except ServiceUnavailable as unavailable:
            pytest.skip(unavailable.reason)
        if not target.private:
            pytest.skip("rabbitmqctl cannot make a private vhost here (queue arguments are per vhost)")
        yield target


def _notable(log: str) -> str:
    """The worker log's lines that say what happened to messages (the store's retries left out)."""
    lines = [
        line for line in log.splitlines() if "ERROR/" in line or "CRITICAL/" in line or "SIGKILL" in line
    ]
    return "\n".join(line[:300] for line in lines[-40:])


def _until(check: Callable[[], bool], timeout: float, what: str, log: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s\n{_notable(log())}"
        time.sleep(0.2)


def _amqp_depth(app: Any, queue: str) -> int:
    with app.connection_for_write() as connection:
        return int(connection.default_channel.queue_declare(queue=queue, passive=True).message_count)


def _plain_text(app: Any, body: bytes) -> None:
    """Publish ``body`` with no headers to the app's queue, as a broken producer would."""
    queue = app.conf.task_default_queue
    with app.producer_or_acquire() as producer:
        producer.publish(
            body,
            exchange=queue,
            routing_key=queue,
            content_type="text/plain",
            content_encoding="utf-8",
            declare=[app.amqp.queues[queue]],
        )


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_a_plain_text_body_without_headers_is_dead_lettered_on_both_brokers(
    broker: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with ExitStack() as stack:
        try:
            redis = stack.enter_context(private_redis_server())
        except ServiceUnavailable as unavailable:
            pytest.skip(unavailable.reason)
        url = redis.url if broker == "redis" else request.getfixturevalue("rabbit").url
        database_url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
        env = {"DATABASE_URL": database_url, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
        worker = stack.enter_context(
            run_worker_process(
                broker_url=url, result_backend=redis.url, imports=["workflows.parity"], env=env
            )
        )
        app = create_app(
            overrides={"broker_url": url, "result_backend": redis.url, "database_url": database_url}
        )
        stack.callback(app.close)
        dead = f"{app.conf.task_default_queue}.dead"
        if broker == "redis":
            client = redis_client.Redis.from_url(redis.url)

            def depth() -> int:
                return int(client.llen(dead))
        else:

            def depth() -> int:
                return _amqp_depth(app, dead)

        _plain_text(app, b"launch the thing, please")

        _until(lambda: depth() == 1, 60, "the dead-lettering", worker.log_text)
        if broker == "redis":
            kept = json.loads(client.lindex(dead, 0) or b"{}")  # kombu's envelope of the message
            assert base64.b64decode(kept["body"]) == b"launch the thing, please"  # kept as it came
        assert worker.is_alive()
        after = app.send_task(LAUNCH, kwargs={"runnable": "parity.count", "input": 2})
        assert after.get(timeout=60) is not None  # the worker goes on
        assert depth() == 1


def test_on_rabbitmq_a_message_at_its_limit_with_the_store_away_is_dead_lettered(
    rabbit: RabbitMQTarget,
    pg_database_url: str,
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTLOOP_DELIVERY_LIMIT", "1")  # the client's queues match the worker's
    go = tmp_path / "go"
    with running_rig(
        pg_database_url,
        rabbit.url,
        retry_seconds=1,
        concurrency=1,
        imports=("workflows.delivery",),
        env={"AGENTLOOP_DELIVERY_LIMIT": "1"},
        result_backend=redis_url,
    ) as durability_rig:
        assert durability_rig.proxy is not None
        dead = f"{durability_rig.app.conf.task_default_queue}.dead"
        result = durability_rig.app.send_task(
            LAUNCH, kwargs={"runnable": "delivery.kills_when_told", "input": 3, "context": {"go": str(go)}}
        )

        def running() -> bool:
            record = durability_rig.store.get_run(result.id)
            return record is not None and record.status == "running"

        _until(running, 60, "the run's start", durability_rig.worker.log_text)
        with durability_rig.proxy.refusing():  # the store away from the worker, for good
            go.touch()  # the first delivery kills its process; the second is the limit's
            _until(
                lambda: _amqp_depth(durability_rig.app, dead) == 1,
                120,
                "the dead-lettering",
                durability_rig.worker.log_text,
            )
            assert "Dead-lettered agentloop.launch" in durability_rig.worker.log_text()
        record = durability_rig.store.get_run(result.id)
        assert record is not None and record.status == "running"  # not ended: an operator's to see
        assert durability_rig.worker.is_alive()

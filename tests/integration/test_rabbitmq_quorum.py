"""RabbitMQ as a first-class broker (issue 25): quorum queues with a delivery limit, the batch queue
that keeps a run launched beside a batch from waiting behind it, and the delivery limit as the last
guard against a message that kills every worker that takes it. All on a private vhost.

The slow parts (the broker restarted, connections dropped, workers killed, several workers on a
2,000-input batch) are in ``python -m tests.faults --broker rabbitmq``."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.batches import BATCH_PRIORITY, summarize
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.settings import load_settings
from agentloop.orchestration.store import RunStore, open_store
from agentloop.orchestration.wire import BATCH, LAUNCH
from tests.services.rabbitmq import RabbitMQTarget, list_queues, private_rabbitmq
from tests.services.redis_server import RedisServer, ServiceUnavailable, private_redis_server
from tests.services.worker import run_worker_process

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parent.parent
LIMIT = 2


@pytest.fixture
def target() -> Iterator[RabbitMQTarget]:
    with ExitStack() as stack:
        try:
            rabbit = stack.enter_context(private_rabbitmq())
        except ServiceUnavailable as unavailable:
            pytest.skip(unavailable.reason)
        if not rabbit.private:
            pytest.skip("rabbitmqctl cannot make a private vhost here (queue arguments are per vhost)")
        yield rabbit


def _app(broker: str, backend: str, database_url: str = "sqlite://") -> Celery:
    """A client app whose settings match the workers' (the queues' arguments must be the same)."""
    env = {
        "BROKER_URL": broker,
        "RESULT_BACKEND": backend,
        "DATABASE_URL": database_url,
        "AGENTLOOP_DELIVERY_LIMIT": str(LIMIT),
    }
    return create_app(settings=load_settings(env))


def _depth(app: Celery, queue: str) -> int:
    with app.connection_for_write() as connection:
        return int(connection.default_channel.queue_declare(queue=queue, passive=True).message_count)


def test_the_queues_are_quorum_queues_with_the_delivery_limit_and_batches_have_their_own(
    target: RabbitMQTarget,
) -> None:
    app = _app(target.url, "cache+memory://")
    try:
        plain = app.send_task(LAUNCH, kwargs={"runnable": "parity.count", "input": 1})
        batched = app.send_task(
            LAUNCH, kwargs={"runnable": "parity.count", "input": 1}, priority=BATCH_PRIORITY
        )
        assert plain.id != batched.id
        assert (_depth(app, "agentloop"), _depth(app, "agentloop.batch")) == (1, 1)
        assert app.conf.broker_transport_options["confirm_publish"] is True
    finally:
        app.close()
    queues = list_queues(target.vhost)
    for name in ("agentloop", "agentloop.batch"):
        kind, arguments = queues[name]
        assert kind == "quorum", (name, kind)
        assert arguments["x-delivery-limit"] == LIMIT, arguments
        assert arguments["x-dead-letter-routing-key"] == "agentloop.dead", arguments


def _ended(store: RunStore, run_id: str) -> bool:
    record = store.get_run(run_id)
    return record is not None and record.is_finished


def _until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.1)


def test_on_a_real_worker_a_batch_and_its_countdowns_run_and_a_poison_message_ends_failed_at_the_limit(
    target: RabbitMQTarget, tmp_path: Path
) -> None:
    import workflows.durable
    import workflows.parity  # noqa: F401

    database_url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    store: RunStore = open_store(database_url)[0]
    with ExitStack() as stack:
        try:
            redis: RedisServer = stack.enter_context(private_redis_server())
        except ServiceUnavailable as unavailable:
            pytest.skip(unavailable.reason)
        env = {
            "DATABASE_URL": database_url,
            "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)]),
            "AGENTLOOP_DELIVERY_LIMIT": str(LIMIT),
        }
        worker = stack.enter_context(
            run_worker_process(
                broker_url=target.url,
                result_backend=redis.url,
                imports=["workflows.parity", "workflows.durable"],
                env=env,
                concurrency=1,
            )
        )
        app = _app(target.url, redis.url, database_url)
        stack.callback(app.close)

        # a batch: its chunks and launches go through agentloop.batch, its summary is a countdown
        # (native delayed delivery: a quorum queue has no global QoS for an ETA held in the worker)
        kwargs = {"runnable": "parity.count", "inputs": [1, 2, 3, 4, 5], "chunk_size": 2, "poll_seconds": 0.5}
        batch_id = app.send_task(BATCH, kwargs=kwargs).get(timeout=60)["batch_id"]
        _until(lambda: _ended(store, batch_id), 90, "the batch's summary")
        assert summarize(store, batch_id)["succeeded"] == 5
        assert store.get_run(batch_id).status == "succeeded"  # type: ignore[union-attr]

        # a message that kills its pool process on every delivery: run LIMIT + 1 times at most
        runner = CeleryAgentRunner.create(runnable="durable.kills_its_process", app=app, store=store)
        handle = runner.request_sync(input=1)
        _until(lambda: _ended(store, handle.run_id), 120, "the poisoned run's end")
        record = store.get_run(handle.run_id)
        assert record is not None and record.status == "failed"
        assert record.error["type"] == "DeliveryLimitError", record.error
        assert f"delivery limit {LIMIT}" in record.error["message"]
        # the recorder writes the run first, then the result its waiters read
        _until(lambda: app.AsyncResult(handle.run_id).state == "FAILURE", 30, "the poisoned run's result")
        kills = worker.log_text().count("exited with 'signal 9 (SIGKILL)'")
        assert kills == LIMIT, f"{kills} pool processes killed: one per delivery up to the limit"

        # the worker goes on, and nothing was dead-lettered: the last delivery settled it
        after = CeleryAgentRunner.create(runnable="parity.count", app=app, store=store).request_sync(input=2)
        assert after.wait_sync(timeout=60) is not None
        assert worker.is_alive()
        assert _depth(app, "agentloop.dead") == 0

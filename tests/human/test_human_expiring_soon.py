"""A question that expires within a second expires like any other, on a real worker on Redis and
on RabbitMQ: its expiry is sent at once when its time is (nearly) up, never with a countdown the
broker refuses (RabbitMQ's native delayed delivery takes whole seconds, at least one)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from human_support import start, waits

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import SqlRunStore, open_store
from tests.services.rabbitmq import private_rabbitmq
from tests.services.redis_server import ServiceUnavailable, private_redis_server
from tests.services.worker import run_worker_process

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", params=["redis", "rabbitmq"])
def expiring_rig(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[object, SqlRunStore]]:
    """A worker and its client on ``request.param`` as the broker (results in a private Redis)."""
    folder = tmp_path_factory.mktemp(f"expiring-{request.param}")
    database_url = f"sqlite:///{folder / 'runs.sqlite3'}"
    store, _ = open_store(database_url)
    with ExitStack() as stack:
        stack.callback(store.engine.dispose)
        try:
            redis = stack.enter_context(private_redis_server())
            broker, queue = redis.url, "agentloop"
            if request.param == "rabbitmq":
                rabbit = stack.enter_context(private_rabbitmq())
                broker, queue = rabbit.url, rabbit.queue
        except ServiceUnavailable as unavailable:
            pytest.skip(unavailable.reason)
        env = {
            "DATABASE_URL": database_url,
            "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)]),
            "AGENTLOOP_CHECKPOINT_SECONDS": "0",
            "AGENTLOOP_TASK_DEFAULT_QUEUE": queue,
        }
        stack.enter_context(
            run_worker_process(
                broker_url=broker, result_backend=redis.url, imports=["workflows.human"], env=env
            )
        )
        app = create_app(
            registry=RunnableRegistry.from_modules(["workflows.human"]),
            store=store,
            overrides={"broker_url": broker, "result_backend": redis.url, "task_default_queue": queue},
        )
        stack.callback(app.close)
        yield app, store


@pytest.mark.parametrize("expires_in", [0.3, 0.9, 1.0, 1.5])
def test_a_question_expiring_within_a_second_takes_its_default(expiring_rig, expires_in: float) -> None:
    app, store = expiring_rig
    handle = start(app, store, "human.expiring_soon", expires_in)
    assert handle.wait_sync(timeout=60)["steps"] == ["step0", "approved=nobody", "step2"]
    assert store.get_run(handle.run_id).status == "succeeded"
    assert [wait.status for wait in waits(store, handle.run_id)] == ["expired"]

"""Smoke test on RabbitMQ: a composite workflow (a chord, expanded at run time) runs on a
real worker whose broker is RabbitMQ, with results in Redis, as ``docs/deployment.md`` documents."""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path

import pytest

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.store import open_store
from tests.services.rabbitmq import private_rabbitmq
from tests.services.redis_server import ServiceUnavailable, private_redis_server
from tests.services.worker import run_worker_process

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parent.parent


def test_a_pipeline_with_a_composite_runs_with_rabbitmq_as_the_broker(tmp_path: Path) -> None:
    import workflows.parity  # noqa: F401

    database_url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    store, _ = open_store(database_url)
    with ExitStack() as stack:
        try:
            rabbit = stack.enter_context(private_rabbitmq())
            redis = stack.enter_context(private_redis_server())
        except ServiceUnavailable as unavailable:
            pytest.skip(unavailable.reason)
        env = {
            "DATABASE_URL": database_url,
            "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)]),
            "AGENTLOOP_TASK_DEFAULT_QUEUE": rabbit.queue,
        }
        stack.enter_context(
            run_worker_process(
                broker_url=rabbit.url,
                result_backend=redis.url,
                imports=["workflows.parity"],
                env=env,
            )
        )
        app = create_app(
            overrides={
                "broker_url": rabbit.url,
                "result_backend": redis.url,
                "task_default_queue": rabbit.queue,
            }
        )
        stack.callback(app.close)
        handle = CeleryAgentRunner.create(
            runnable="parity.fan_after_stage", app=app, store=store
        ).request_sync(input=2)
        result = handle.wait_sync(timeout=60)

    assert result == {"total": sum(range(5)) + 15, "keys": ["0", "1", "2", "3", "4"]}
    record = store.get_run(handle.run_id)
    assert record is not None and record.status == "succeeded"

"""Fixtures of the operations tests: a private Redis, a real worker and a real Flower process.

The worker and Flower get the same environment a deployment gives them
(``BROKER_URL``, ``RESULT_BACKEND``, ``AGENTLOOP_IMPORTS``, ``DATABASE_URL``,
a unique ``AGENTLOOP_TASK_DEFAULT_QUEUE``), and Flower runs with basic auth.
Every process is stopped afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from celery import Celery
from context_secrets_support import app_with_a_key_in_its_contexts
from ops_support import IMPORTS, FlowerClient, OpsStack, run_flower, service_env, wait_for_events

from tests.services.redis_server import ServiceUnavailable, private_redis_server
from tests.services.worker import run_worker_process


@pytest.fixture(scope="module")
def ops_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpsStack]:
    """Redis, one prefork worker (loglevel INFO) and Flower with basic auth, sharing a SQLite run store."""
    with ExitStack() as stack:
        try:
            redis = stack.enter_context(private_redis_server())
        except ServiceUnavailable as unavailable:
            pytest.skip(unavailable.reason)
        database_url = f"sqlite:///{tmp_path_factory.mktemp('ops') / 'runs.sqlite3'}"
        queue = f"ops-{uuid.uuid4().hex[:8]}"
        env = service_env(broker_url=redis.url, database_url=database_url, queue=queue)
        worker = stack.enter_context(
            run_worker_process(
                broker_url=redis.url,
                result_backend=redis.url,
                imports=IMPORTS,
                env={key: env[key] for key in ("DATABASE_URL", "PYTHONPATH", "AGENTLOOP_TASK_DEFAULT_QUEUE")},
                concurrency=2,
                loglevel="INFO",
            )
        )
        flower = stack.enter_context(run_flower(env))
        client = FlowerClient(flower.url)
        wait_for_events(client)
        yield OpsStack(redis=redis, worker=worker, flower=flower, client=client, env=env)


@pytest.fixture
def keyed_app() -> Iterator[Celery]:
    """An embedded app whose runnables' contexts carry an API key (``context_secrets_support``)."""
    with app_with_a_key_in_its_contexts() as app:
        yield app

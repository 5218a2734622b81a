"""Fixtures of the Celery infrastructure tests: private servers, skipped (or failed under CI) when missing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from agentloop.orchestration.celery_adapter.app import create_app
from tests.services.rabbitmq import RabbitMQTarget, private_rabbitmq
from tests.services.redis_server import ServiceUnavailable
from tests.services.worker_environment import redis_fixture

redis_server = redis_fixture()


@pytest.fixture
def rabbitmq() -> Iterator[RabbitMQTarget]:
    """A private RabbitMQ vhost (or a unique queue on ``/``) for one test."""
    with ExitStack() as stack:
        try:
            target = stack.enter_context(private_rabbitmq())
        except ServiceUnavailable as exc:
            pytest.skip(exc.reason)
        yield target


@pytest.fixture
def memory_app() -> Iterator[Any]:
    """An agentloop app on ``memory://`` with its own default queue, whatever the environment says."""
    app = create_app(
        overrides={
            "broker_url": "memory://",
            "result_backend": "cache+memory://",
            "task_default_queue": f"test-{uuid.uuid4().hex[:8]}",
        }
    )
    try:
        yield app
    finally:
        app.close()

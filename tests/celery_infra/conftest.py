"""Fixtures of the Celery infrastructure tests: private servers, skipped (or failed under CI) when missing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from agentloop.orchestration.celery_adapter.app import create_app
from tests.servers.rabbitmq import RabbitMQTarget, private_rabbitmq
from tests.servers.redis_server import RedisServer, ServiceUnavailable, private_redis_server


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A private ``redis-server`` for one test (it starts in a few milliseconds)."""
    with ExitStack() as stack:
        try:
            server = stack.enter_context(private_redis_server())
        except ServiceUnavailable as exc:
            pytest.skip(exc.reason)
        yield server


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

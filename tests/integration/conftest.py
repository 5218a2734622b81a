"""A prefork worker of one pool process on a Redis of its own, for tests that look at what one
worker process does (its result subscriptions, the messages it sends)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import RunStore
from tests.services.worker_environment import WorkerEnvironment

#: What the lone worker imports (and the test's registry knows).
LONE_WORKER_MODULES = ("workflows.parity", "workflows.outgoing")


@dataclass(frozen=True, kw_only=True)
class LoneWorker:
    app: Any
    store: RunStore
    redis_url: str


@pytest.fixture(scope="module")
def lone_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoneWorker]:
    """One prefork worker (one pool process) on a private Redis, a SQLite store shared with the test."""
    with ExitStack() as stack:
        services = WorkerEnvironment.start(stack, tmp_path_factory.mktemp("lone-worker"))
        services.start_worker(LONE_WORKER_MODULES, concurrency=1)
        app = services.client(registry=RunnableRegistry.from_modules(LONE_WORKER_MODULES))
        yield LoneWorker(app=app, store=services.store, redis_url=services.redis.url)

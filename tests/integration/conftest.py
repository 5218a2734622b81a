"""A prefork worker of one pool process on a Redis of its own, for tests that look at what one
worker process does (its result subscriptions, the messages it sends)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import RunStore
from tests.services.private_services import redis_and_store
from tests.services.worker import run_worker_process

ROOT = Path(__file__).resolve().parents[2]
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
        services = redis_and_store(stack, tmp_path_factory.mktemp("lone-worker"))
        server, database_url, store = services.redis, services.database_url, services.store
        env = {"DATABASE_URL": database_url, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
        stack.enter_context(
            run_worker_process(
                broker_url=server.url,
                result_backend=server.url,
                imports=list(LONE_WORKER_MODULES),
                env=env,
                concurrency=1,
            )
        )
        registry = RunnableRegistry.from_modules(LONE_WORKER_MODULES)
        urls = {"broker_url": server.url, "result_backend": server.url}
        app = create_app(registry=registry, store=store, overrides=urls)
        stack.callback(app.close)
        yield LoneWorker(app=app, store=store, redis_url=server.url)

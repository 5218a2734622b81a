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
from agentloop.orchestration.store import RunStore, open_store
from tests.servers.redis_server import ServiceUnavailable, private_redis_server
from tests.servers.worker import run_worker_process

ROOT = Path(__file__).resolve().parents[2]
#: What the lone worker imports (and the test's registry knows).
LONE_WORKER_MODULES = ("parity_workflows", "outgoing_workflows")


@dataclass(frozen=True, kw_only=True)
class LoneWorker:
    app: Any
    store: RunStore
    redis_url: str


@pytest.fixture(scope="module")
def lone_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoneWorker]:
    """One prefork worker (one pool process) on a private Redis, a SQLite store shared with the test."""
    with ExitStack() as stack:
        try:
            server = stack.enter_context(private_redis_server())
        except ServiceUnavailable as unavailable:
            pytest.skip(unavailable.reason)
        database_url = f"sqlite:///{tmp_path_factory.mktemp('lone-worker') / 'runs.sqlite3'}"
        store, _ = open_store(database_url)
        stack.callback(store.engine.dispose)
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

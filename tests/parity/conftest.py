"""The parity suite's rig: a real prefork worker with four processes on a private Redis, so a
composite's ``max_concurrency`` of 2 is what bounds its branches, not the pool."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import RunStore
from tests.servers.private_services import redis_and_store
from tests.servers.worker import run_worker_process

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
#: Worker processes: more than any composite's bound in the suite.
WORKER_CONCURRENCY = 4


@dataclass
class ParityRig:
    """The client's app, and the run store the client and the worker share."""

    app: Any
    store: RunStore


def _close_result_consumer(app: Any) -> None:
    """Collect pending results while Redis runs, then close the result consumer's pub/sub."""
    gc.collect()
    pubsub = getattr(getattr(app.backend, "result_consumer", None), "_pubsub", None)
    if pubsub is not None:
        pubsub.close()
        app.backend.result_consumer._pubsub = None


@pytest.fixture(scope="session")
def parity_celery(
    tmp_path_factory: pytest.TempPathFactory, parity_registry: RunnableRegistry
) -> Iterator[Any]:
    """A worker of :data:`WORKER_CONCURRENCY` processes running ``parity_workflows``, sharing a
    SQLite run store with the test."""
    with ExitStack() as stack:
        services = redis_and_store(stack, tmp_path_factory.mktemp("parity-celery"))
        server, database_url, store = services.redis, services.database_url, services.store
        stack.enter_context(
            run_worker_process(
                broker_url=server.url,
                result_backend=server.url,
                imports=["parity_workflows"],
                env={"DATABASE_URL": database_url, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])},
                concurrency=WORKER_CONCURRENCY,
            )
        )
        app = create_app(
            registry=parity_registry,
            store=store,
            overrides={"broker_url": server.url, "result_backend": server.url},
        )
        stack.callback(app.close)
        stack.callback(_close_result_consumer, app)
        yield ParityRig(app=app, store=store)

"""A real prefork worker on a private Redis for the edge tests.

One worker serves the whole package: each poison test checks that it is still alive and still
runs the next message, which is the point of the edge.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from edge_support import EdgeRig

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.registry import RunnableRegistry
from tests.servers.private_services import redis_and_store
from tests.servers.worker import run_worker_process

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
ROOT = TESTS.parent
#: What the edge worker can run: the parity workflows, this package's, and the README's example.
EDGE_MODULES = ("parity_workflows", "edge_workflows", "agentloop.examples.record_search.workflows")


@pytest.fixture(scope="package")
def edge_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EdgeRig]:
    with ExitStack() as stack:
        folder = tmp_path_factory.mktemp("edge")
        services = redis_and_store(stack, folder)
        server, database_url, store = services.redis, services.database_url, services.store
        worker = stack.enter_context(
            run_worker_process(
                broker_url=server.url,
                result_backend=server.url,
                imports=EDGE_MODULES,
                env={
                    "DATABASE_URL": database_url,
                    "PYTHONPATH": os.pathsep.join(map(str, (ROOT, TESTS, HERE))),
                },
                concurrency=2,
            )
        )
        app = create_app(
            registry=RunnableRegistry.from_modules(EDGE_MODULES),
            store=store,
            overrides={"broker_url": server.url, "result_backend": server.url},
        )
        stack.callback(app.close)
        yield EdgeRig(app=app, store=store, worker=worker, broker_url=server.url)

"""A real prefork worker on a private Redis for the edge tests.

One worker serves the whole package: each poison test checks that it is still alive and still
runs the next message, which is the point of the edge.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from edge_support import EdgeRig

from agentloop.orchestration.registry import RunnableRegistry
from tests.services.worker_environment import WorkerEnvironment

HERE = Path(__file__).resolve().parent
#: What the edge worker can run: the parity workflows, this package's, and the README's example.
EDGE_MODULES = ("workflows.parity", "edge_workflows", "agentloop.examples.record_search.workflows")


@pytest.fixture(scope="package")
def edge_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EdgeRig]:
    with ExitStack() as stack:
        services = WorkerEnvironment.start(stack, tmp_path_factory.mktemp("edge"), paths=[HERE])
        worker = services.start_worker(EDGE_MODULES, concurrency=2)
        app = services.client(registry=RunnableRegistry.from_modules(EDGE_MODULES))
        yield EdgeRig(app=app, store=services.store, worker=worker, broker_url=services.redis.url)

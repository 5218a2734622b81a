"""The parity suite's rig: a real prefork worker with four processes on a private Redis, so a
composite's ``max_concurrency`` of 2 is what bounds its branches, not the pool."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import RunStore
from tests.services.worker_environment import WorkerEnvironment

#: Worker processes: more than any composite's bound in the suite.
WORKER_CONCURRENCY = 4


@dataclass
class ParityRig:
    """The client's app, and the run store the client and the worker share."""

    app: Any
    store: RunStore


@pytest.fixture(scope="session")
def parity_celery(
    tmp_path_factory: pytest.TempPathFactory, parity_registry: RunnableRegistry
) -> Iterator[Any]:
    """A worker of :data:`WORKER_CONCURRENCY` processes running ``workflows.parity``, sharing a
    SQLite run store with the test."""
    with ExitStack() as stack:
        services = WorkerEnvironment.start(stack, tmp_path_factory.mktemp("parity-celery"))
        services.start_worker(["workflows.parity"], concurrency=WORKER_CONCURRENCY)
        yield ParityRig(app=services.client(registry=parity_registry), store=services.store)

"""The human-in-the-loop rig: a private Redis and a SQLite run store shared by the test and real
prefork workers (``human_workflows``), started by the test or once for the module."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import SqlRunStore, open_store
from tests.servers.redis_server import ServiceUnavailable, private_redis_server
from tests.servers.worker import WorkerProcess, run_worker_process

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent


@dataclass
class HumanRig:
    """The client's app, the shared run store, and how to start a worker on them."""

    app: Any
    store: SqlRunStore
    #: What a command line reads: ``DATABASE_URL``, ``BROKER_URL`` and ``RESULT_BACKEND``.
    env: dict[str, str]
    worker: Callable[[], AbstractContextManager[WorkerProcess]]


def _close_result_consumer(app: Any) -> None:
    gc.collect()
    pubsub = getattr(getattr(app.backend, "result_consumer", None), "_pubsub", None)
    if pubsub is not None:
        pubsub.close()
        app.backend.result_consumer._pubsub = None


@pytest.fixture(scope="module")
def human_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HumanRig]:
    with ExitStack() as stack:
        try:
            server = stack.enter_context(private_redis_server())
        except ServiceUnavailable as unavailable:
            pytest.skip(unavailable.reason)
        database_url = f"sqlite:///{tmp_path_factory.mktemp('human') / 'runs.sqlite3'}"
        store, _ = open_store(database_url)
        stack.callback(store.engine.dispose)
        env = {
            "DATABASE_URL": database_url,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]),
            # every finished iteration checkpointed, so a resumed loop starts where it paused
            "AGENTLOOP_CHECKPOINT_SECONDS": "0",
        }

        def worker() -> AbstractContextManager[WorkerProcess]:
            return run_worker_process(
                broker_url=server.url,
                result_backend=server.url,
                imports=["human_workflows"],
                env=env,
                concurrency=3,
            )

        registry = RunnableRegistry.from_modules(["human_workflows"])
        app = create_app(
            registry=registry,
            store=store,
            overrides={"broker_url": server.url, "result_backend": server.url},
        )
        stack.callback(app.close)
        stack.callback(_close_result_consumer, app)
        cli_env = {"DATABASE_URL": database_url, "BROKER_URL": server.url, "RESULT_BACKEND": server.url}
        yield HumanRig(app=app, store=store, env=cli_env, worker=worker)


@pytest.fixture(scope="module")
def human_worker(human_rig: HumanRig) -> Iterator[HumanRig]:
    """The rig with one worker running for the module."""
    with human_rig.worker():
        yield human_rig

"""The human-in-the-loop rig: a private Redis and a SQLite run store shared by the test and real
prefork workers (``human_workflows``), started by the test or once for the module."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import SqlRunStore
from tests.servers.private_services import redis_and_store
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


@contextmanager
def open_human_rig(
    folder: Path, *, imports: Sequence[str] = ("human_workflows",), extra_env: Mapping[str, str] | None = None
) -> Iterator[HumanRig]:
    """The rig on a private Redis and a SQLite store in ``folder``; its workers import ``imports``
    and get ``extra_env``."""
    with ExitStack() as stack:
        services = redis_and_store(stack, folder)
        server, database_url, store = services.redis, services.database_url, services.store
        env = {
            "DATABASE_URL": database_url,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]),
            # every finished iteration checkpointed, so a resumed loop starts where it paused
            "AGENTLOOP_CHECKPOINT_SECONDS": "0",
            **(extra_env or {}),
        }

        def worker() -> AbstractContextManager[WorkerProcess]:
            return run_worker_process(
                broker_url=server.url,
                result_backend=server.url,
                imports=imports,
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
def human_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HumanRig]:
    with open_human_rig(tmp_path_factory.mktemp("human")) as rig:
        yield rig


#: Short limits: a killed worker's unacknowledged messages are restored 10 s after delivery.
SHORT_LIMITS = {
    "AGENTLOOP_TASK_SOFT_TIME_LIMIT": "8",
    "AGENTLOOP_TASK_TIME_LIMIT": "9",
    "AGENTLOOP_VISIBILITY_TIMEOUT": "10",
    "AGENTLOOP_UNACKED_RESTORE_SECONDS": "1",
}


@pytest.fixture(scope="module")
def crash_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The file that arms ``crash_points`` in :func:`crash_rig`'s workers."""
    return tmp_path_factory.mktemp("crash") / "armed"


@pytest.fixture(scope="module")
def crash_rig(tmp_path_factory: pytest.TempPathFactory, crash_file: Path) -> Iterator[HumanRig]:
    """The rig whose workers die after the write named in ``crash_file`` (``tests/crash_points.py``)."""
    env = {**SHORT_LIMITS, "AGENTLOOP_TEST_CRASH_FILE": str(crash_file)}
    imports = ("human_workflows", "crash_points")
    with open_human_rig(tmp_path_factory.mktemp("human-crash"), imports=imports, extra_env=env) as rig:
        yield rig


@pytest.fixture(scope="module")
def human_worker(human_rig: HumanRig) -> Iterator[HumanRig]:
    """The rig with one worker running for the module."""
    with human_rig.worker():
        yield human_rig

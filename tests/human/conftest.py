"""The human-in-the-loop rig: a private Redis and a SQLite run store shared by the test and real
prefork workers (``workflows.human``), started by the test or once for the module."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import SqlRunStore
from tests.services.worker import WorkerProcess
from tests.services.worker_environment import WorkerEnvironment


@dataclass
class HumanRig:
    """The client's app, the shared run store, and how to start a worker on them."""

    app: Any
    store: SqlRunStore
    #: What a command line reads: ``DATABASE_URL``, ``BROKER_URL`` and ``RESULT_BACKEND``.
    env: dict[str, str]
    worker: Callable[[], AbstractContextManager[WorkerProcess]]


@contextmanager
def open_human_rig(
    folder: Path,
    *,
    imports: Sequence[str] = ("workflows.human",),
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[HumanRig]:
    """The rig on a private Redis and a SQLite store in ``folder``; its workers import ``imports``
    and get ``extra_env``."""
    with ExitStack() as stack:
        # every finished iteration checkpointed, so a resumed loop starts where it paused
        env = {"AGENTLOOP_CHECKPOINT_SECONDS": "0", **(extra_env or {})}
        services = WorkerEnvironment.start(stack, folder, env=env)
        app = services.client(registry=RunnableRegistry.from_modules(["workflows.human"]))
        yield HumanRig(
            app=app,
            store=services.store,
            env=services.cli_env,
            worker=lambda: services.worker(imports, concurrency=3),
        )


@pytest.fixture(scope="module")
def human_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HumanRig]:
    with open_human_rig(tmp_path_factory.mktemp("human")) as rig:
        yield rig


#: Short limits: a killed worker's unacknowledged messages are restored 6 s after delivery. The
#: tasks of ``workflows.human`` took 0.5 s at most in the crash tests' worker logs (a fresh pool
#: process's first), 8 times inside the 4 s soft limit.
SHORT_LIMITS = {
    "AGENTLOOP_TASK_SOFT_TIME_LIMIT": "4",
    "AGENTLOOP_TASK_TIME_LIMIT": "5",
    "AGENTLOOP_VISIBILITY_TIMEOUT": "6",
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
    imports = ("workflows.human", "crash_points")
    with open_human_rig(tmp_path_factory.mktemp("human-crash"), imports=imports, extra_env=env) as rig:
        yield rig


@pytest.fixture(scope="module")
def human_worker(human_rig: HumanRig) -> Iterator[HumanRig]:
    """The rig with one worker running for the module."""
    with human_rig.worker():
        yield human_rig

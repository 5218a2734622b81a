"""Shared fixtures: a private run store, and Celery on the embedded and real workers.

Servers come from ``agentloop.orchestration.testing``: a private ``redis-server`` and a
private RabbitMQ vhost. Without them a test is skipped with the reason, except
under ``CI=true``, where a missing server is an error.
"""

from __future__ import annotations

import compileall
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import InMemoryRunStore, RunStore, open_store
from tests.canvas_support import FakeTask
from tests.newcomer import MACHINE_SETTINGS
from tests.services.postgres import PostgresUnavailableError, postgres_server, private_database, skip_or_fail
from tests.services.redis_server import RedisServer, ServiceUnavailable, private_redis_server
from tests.services.worker_environment import WorkerEnvironment, embedded_app

#: pytester for tests of test machinery; ci_policy turns skips into failures under CI=true.
pytest_plugins = ["pytester", "ci_policy", "agentloop.testing"]

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    """Where ``PYTHONDONTWRITEBYTECODE`` is set (CI's machine), compile ``agentloop`` to bytecode once,
    in the main process before xdist starts its workers: every process the suite starts (xdist's,
    each Celery worker, each command line) imports agentloop, and each compiled all of it again
    (0.3 s of CPU a process). The files go to ``__pycache__``, which git ignores."""
    if sys.dont_write_bytecode and not hasattr(config, "workerinput"):
        compileall.compile_dir(ROOT / "agentloop", quiet=1)


@pytest.fixture(scope="session", autouse=True)
def _a_home_of_the_tests(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """``AGENTLOOP_HOME`` for the session (unless set): the default store of whatever a test runs
    (the CLI, a worker process) is a folder of the tests', never the user's per-user home."""
    if os.environ.get("AGENTLOOP_HOME"):
        yield
        return
    os.environ["AGENTLOOP_HOME"] = str(tmp_path_factory.mktemp("agentloop-home"))
    try:
        yield
    finally:
        os.environ.pop("AGENTLOOP_HOME", None)


@dataclass
class CeleryRig:
    """A Celery app with a worker consuming its queue, and the run store both sides share."""

    app: Any
    store: RunStore
    broker_url: str
    registry: RunnableRegistry
    worker: Any = None


def _sqlite_url(folder: Path) -> str:
    return f"sqlite:///{folder / 'runs.sqlite3'}"


@pytest.fixture
def sqlite_run_store(tmp_path: Path) -> Iterator[RunStore]:
    """A fresh SQLite run store."""
    store, _ = open_store(_sqlite_url(tmp_path))
    try:
        yield store
    finally:
        store.engine.dispose()


#: Every run store: the memory twin, SQLite and PostgreSQL (an integration test).
EVERY_STORE = ["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.integration)]


@pytest.fixture(params=EVERY_STORE)
def each_run_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunStore]:
    """Each run store on an empty database, in turn."""
    if request.param == "memory":
        yield InMemoryRunStore()
        return
    with ExitStack() as stack:
        if request.param == "postgresql":
            try:
                admin = stack.enter_context(postgres_server())
            except PostgresUnavailableError as error:
                skip_or_fail(str(error))
            url = stack.enter_context(private_database(admin))
        else:
            url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
        sql_store, _ = open_store(url)
        stack.callback(sql_store.engine.dispose)
        yield sql_store


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``AGENTLOOP_HOME`` (``.agentloop``) and working folder, with none of the machine's
    settings: the embedded defaults a newcomer's command line gets (the CLI and evaluation tests)."""
    for name in MACHINE_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGENTLOOP_HOME", str(tmp_path / ".agentloop"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def canvas_task() -> Iterator[FakeTask]:
    """A fake task on an app of its own, for the canvas compiler's tests."""
    app = create_app(overrides={"broker_url": "memory://", "result_backend": "cache+memory://"})
    yield FakeTask(app)
    app.close()


#: The modules whose runnables the in-process Celery rigs can run.
WORKFLOW_MODULES = (
    "workflows.parity",
    "workflows.fallback",
    "agentloop.examples.record_search.workflows",
)


@pytest.fixture
def restartable_redis(monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    """A ``redis-server`` this test starts, stops and restarts itself: one is started even when
    ``AGENTLOOP_TEST_REDIS_URL`` names an external server, which a test cannot restart."""
    monkeypatch.delenv("AGENTLOOP_TEST_REDIS_URL", raising=False)
    with ExitStack() as stack:
        try:
            server = stack.enter_context(private_redis_server())
        except ServiceUnavailable as unavailable:
            pytest.skip(unavailable.reason)
        assert server.restartable
        yield server


@pytest.fixture(scope="session")
def parity_registry() -> RunnableRegistry:
    """The runnables the test workflow modules (:data:`WORKFLOW_MODULES`) declare."""
    return RunnableRegistry.from_modules(WORKFLOW_MODULES)


@pytest.fixture(scope="session")
def memory_celery(
    tmp_path_factory: pytest.TempPathFactory, parity_registry: RunnableRegistry
) -> Iterator[CeleryRig]:
    """The embedded defaults: ``memory://`` broker, in-memory results, a worker thread."""
    store, _ = open_store(_sqlite_url(tmp_path_factory.mktemp("memory-celery")))
    with embedded_app(parity_registry, store, name="test", concurrency=4) as (app, worker):
        yield CeleryRig(app=app, store=store, broker_url="memory://", registry=parity_registry, worker=worker)


@pytest.fixture(scope="session")
def redis_celery(
    tmp_path_factory: pytest.TempPathFactory, parity_registry: RunnableRegistry
) -> Iterator[CeleryRig]:
    """A real prefork worker process on a private Redis, sharing a SQLite run store with the test."""
    with ExitStack() as stack:
        services = WorkerEnvironment.start(stack, tmp_path_factory.mktemp("redis-celery"))
        worker = services.start_worker(["workflows.parity", "workflows.fallback"], concurrency=2)
        app = services.client(registry=parity_registry)
        yield CeleryRig(
            app=app,
            store=services.store,
            broker_url=services.redis.url,
            registry=parity_registry,
            worker=worker,
        )

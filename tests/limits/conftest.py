"""Fixtures of the rate-limit and budget tests: a private Redis, a recording model server,
and two real worker processes sharing one broker, one result backend and one run store."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import pytest
from limits_support import RecordingModel, TwoWorkers

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.store import open_store
from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer
from tests.services.redis_server import RedisServer
from tests.services.worker import WorkerProcess, run_worker_process
from tests.services.worker_environment import detach_result_consumer, redis_fixture, worker_pythonpath

redis_server = redis_fixture("module")


@pytest.fixture
def limiter_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every sleep the window limiter takes while waiting for a slot, in seconds (it still sleeps)."""
    import asyncio
    from types import SimpleNamespace

    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        await real_sleep(seconds)

    monkeypatch.setattr("agentloop.orchestration.llm.limits.window.asyncio", SimpleNamespace(sleep=sleep))
    return slept


@pytest.fixture(scope="module")
def model_server() -> Iterator[tuple[OpenAICompatibleServer, RecordingModel]]:
    """A local OpenAI-protocol server whose replies and usage the test controls."""
    recorder = RecordingModel()
    with OpenAICompatibleServer(responder=recorder) as server:
        yield server, recorder


@pytest.fixture(scope="module")
def two_workers(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoWorkers]:
    """Two prefork workers (concurrency 1 each) on one private Redis and one SQLite run store."""
    import workflows.limits  # noqa: F401  (registers the workflows in the test process too)

    database_url = f"sqlite:///{tmp_path_factory.mktemp('limits-workers') / 'runs.sqlite3'}"
    store, _ = open_store(database_url)
    env = {
        "DATABASE_URL": database_url,
        "PYTHONPATH": worker_pythonpath(),
        "AGENTLOOP_TASK_DEFAULT_QUEUE": f"limits-{uuid.uuid4().hex[:8]}",
    }
    managers = [
        run_worker_process(
            broker_url=redis_server.url,
            result_backend=redis_server.url,
            imports=["workflows.limits"],
            env=env,
            concurrency=1,
        )
        for _ in range(2)
    ]
    with ExitStack() as stack:
        # start both at once (each takes seconds to answer its first ping); stop any that started
        with ThreadPoolExecutor(max_workers=2) as pool:
            starts = [pool.submit(manager.__enter__) for manager in managers]
        workers: list[WorkerProcess] = []
        for manager, start in zip(managers, starts, strict=True):
            if start.exception() is None:
                stack.push(manager.__exit__)
                workers.append(start.result())
        for start in starts:
            error = start.exception()
            if error is not None:
                raise error
        # on the way out, ask both to stop before waiting for either
        stack.callback(lambda: [worker.kill(signal.SIGTERM, group=False) for worker in workers])
        app = create_app(
            overrides={
                "broker_url": redis_server.url,
                "result_backend": redis_server.url,
                "task_default_queue": env["AGENTLOOP_TASK_DEFAULT_QUEUE"],
            }
        )
        stack.callback(app.close)
        stack.callback(detach_result_consumer, app)
        yield TwoWorkers(app=app, store=store, redis_url=redis_server.url, workers=(workers[0], workers[1]))

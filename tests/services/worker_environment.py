"""``WorkerEnvironment``: the rig the worker tests build, in one place (as Temporal's
``WorkflowEnvironment``).

A private Redis (broker and results), a SQLite run store and tool store in a folder of the test's,
optionally a local model server, and then, on them, real worker processes and client apps::

    with ExitStack() as stack:
        services = WorkerEnvironment.start(
            stack, folder, model=OpenAICompatibleServer(api_key=KEY, responder=answer), model_key=KEY
        )
        worker = services.start_worker(["workflows.usage"], concurrency=2)
        app = services.client()

Every worker gets :attr:`WorkerEnvironment.env`: ``DATABASE_URL``, a ``PYTHONPATH`` with the project
and ``tests/`` (so ``AGENTLOOP_IMPORTS`` can name ``workflows.*``), the model server's
``OPENAI_*`` settings, and what the test adds. Everything ends with the ``stack``; a machine
without ``redis-server`` skips the test. The folders' rigs (``HumanRig``, ``ParityRig``, ``CachingRig``
...) keep their own attributes and methods, built from one of these.
"""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self

import pytest

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.embedded import embedded_worker
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.settings import Settings
from agentloop.orchestration.store import RunStore, SqlRunStore, SqlToolStore
from agentloop.orchestration.testing.servers.scripted_server import ScriptedReplyServer
from tests.services.private_services import redis_and_store
from tests.services.redis_server import RedisServer, ServiceUnavailable, private_redis_server
from tests.services.worker import WorkerGroup, WorkerProcess, run_worker_process

__all__ = [
    "ROOT",
    "TESTS",
    "WorkerEnvironment",
    "detach_result_consumer",
    "embedded_app",
    "worker_pythonpath",
]

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent


def worker_pythonpath(*more: Path) -> str:
    """A worker's ``PYTHONPATH``: the project, ``tests/`` (the ``workflows`` package), then ``more``."""
    return os.pathsep.join(str(path) for path in (ROOT, TESTS, *more))


def detach_result_consumer(app: Any) -> None:
    """Let results go while Redis still runs: collected after it stopped, they would try to
    unsubscribe from it (and retry, noisily, inside the garbage collector). So collect what can be
    collected while it runs, then close the result consumer's pub/sub."""
    gc.collect()
    consumer: Any = getattr(app.backend, "result_consumer", None)
    pubsub = getattr(consumer, "_pubsub", None)
    if pubsub is not None:
        pubsub.close()
        consumer._pubsub = None


@contextmanager
def embedded_app(
    registry: RunnableRegistry,
    store: RunStore,
    *,
    name: str,
    concurrency: int = 2,
    pool: str = "threads",
    settings: Settings | None = None,
) -> Iterator[tuple[Any, Any]]:
    """``(app, worker)``: the embedded defaults (a ``memory://`` broker, in-memory results) with a
    worker thread pool in this process, running ``registry``'s runnables on ``store``.

    The memory broker is one per process, so the app gets a queue of its own (``name-<8 hex>``);
    the worker stops and the app closes when the block ends (the store stays the caller's)."""
    app = create_app(
        settings=settings,
        registry=registry,
        store=store,
        overrides={
            "broker_url": "memory://",
            "result_backend": "cache+memory://",
            "task_default_queue": f"{name}-{uuid.uuid4().hex[:8]}",
        },
    )
    try:
        with embedded_worker(app, pool=pool, concurrency=concurrency) as worker:
            yield app, worker
    finally:
        app.close()


def redis_fixture(scope: Literal["function", "module", "package", "session"] = "function") -> Any:
    """A fixture: a private ``redis-server`` for ``scope`` (the test is skipped where there is none)."""

    @pytest.fixture(scope=scope)
    def redis_server() -> Iterator[RedisServer]:
        with ExitStack() as stack:
            try:
                server = stack.enter_context(private_redis_server())
            except ServiceUnavailable as unavailable:
                pytest.skip(unavailable.reason)
            yield server

    redis_server.__doc__ = f"A private ``redis-server`` for one {scope} (it starts in milliseconds)."
    return redis_server


@dataclass
class WorkerEnvironment:
    """A private Redis, a SQLite run store, maybe a model server; workers and client apps on them."""

    stack: ExitStack
    redis: RedisServer
    database_url: str
    store: SqlRunStore
    tools: SqlToolStore
    #: What every worker started here gets (see the module doc).
    env: dict[str, str]
    #: The workers :meth:`start_worker` started, stopped together when the stack closes.
    group: WorkerGroup
    #: The local model server the workers' ``OPENAI_BASE_URL`` names, if any.
    model: ScriptedReplyServer | None = None

    @classmethod
    def start(
        cls,
        stack: ExitStack,
        folder: Path,
        *,
        file: str = "runs.sqlite3",
        model: ScriptedReplyServer | None = None,
        model_key: str | None = None,
        env: Mapping[str, str] | None = None,
        paths: Sequence[Path] = (),
    ) -> Self:
        """Redis and the store in ``folder / file``, ``model`` started, for ``stack``'s length.

        With ``model``, the workers ask it (``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` = ``model_key``,
        ``OPENAI_MAX_RETRIES=0``); ``env`` is added after (and wins); ``paths`` go on ``PYTHONPATH``.
        """
        services = redis_and_store(stack, folder, file=file)
        worker_env = {"DATABASE_URL": services.database_url, "PYTHONPATH": worker_pythonpath(*paths)}
        if model is not None:
            stack.enter_context(model)
            worker_env |= {"OPENAI_BASE_URL": str(model.base_url), "OPENAI_MAX_RETRIES": "0"}
            if model_key is not None:
                worker_env["OPENAI_API_KEY"] = model_key
        return cls(
            stack=stack,
            redis=services.redis,
            database_url=services.database_url,
            store=services.store,
            tools=services.tools,
            env={**worker_env, **(env or {})},
            group=WorkerGroup(stack),
            model=model,
        )

    @property
    def cli_env(self) -> dict[str, str]:
        """What a command line reads to reach these: ``DATABASE_URL``, ``BROKER_URL``, ``RESULT_BACKEND``."""
        return {
            "DATABASE_URL": self.database_url,
            "BROKER_URL": self.redis.url,
            "RESULT_BACKEND": self.redis.url,
        }

    def worker(
        self,
        imports: Sequence[str],
        *,
        concurrency: int = 1,
        queue: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AbstractContextManager[WorkerProcess]:
        """A worker process (not started: enter it) importing ``imports``, on ``queue`` if given."""
        queue_env = {"AGENTLOOP_TASK_DEFAULT_QUEUE": queue} if queue is not None else {}
        return run_worker_process(
            broker_url=self.redis.url,
            result_backend=self.redis.url,
            imports=list(imports),
            env={**self.env, **queue_env, **(env or {})},
            concurrency=concurrency,
        )

    def start_worker(
        self,
        imports: Sequence[str],
        *,
        concurrency: int = 1,
        queue: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> WorkerProcess:
        """:meth:`worker`, started for the stack's length (stopped with the others: :class:`WorkerGroup`)."""
        return self.group.start(self.worker(imports, concurrency=concurrency, queue=queue, env=env))

    @property
    def workers(self) -> list[WorkerProcess]:
        """The workers :meth:`start_worker` started, in order."""
        return self.group.workers

    def client(self, *, registry: RunnableRegistry | None = None, queue: str | None = None) -> Any:
        """A client app on this Redis (on ``queue`` if given), closed with the stack.

        With ``registry``, the app is given it and the run store the workers write (as a client
        that knows the runnables does); without, it only sends and reads results."""
        overrides = {"broker_url": self.redis.url, "result_backend": self.redis.url}
        if queue is not None:
            overrides["task_default_queue"] = queue
        if registry is None:
            app = create_app(overrides=overrides)
        else:
            app = create_app(registry=registry, store=self.store, overrides=overrides)
        self.stack.callback(app.close)
        self.stack.callback(detach_result_consumer, app)
        return app

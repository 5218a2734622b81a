"""The benchmark's private infrastructure: a Redis, a migrated run store, a prefork worker, a client app."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Pool processes of the benchmark's worker.
CONCURRENCY = 2
#: ``sqlite`` (default) or ``postgres``: the kind of run store client and worker share.
STORE_ENV = "AGENTLOOP_BENCH_STORE"
#: The checkout's root: the worker's ``PYTHONPATH``, so that it can import :data:`WORKFLOWS_MODULE`.
ROOT = Path(__file__).resolve().parents[2]
#: What the worker imports through ``AGENTLOOP_IMPORTS``.
WORKFLOWS_MODULE = "bench.workflows_celery"


class NotRunnable(Exception):
    """A server the benchmark needs is missing; the message says which."""


@dataclass
class Rig:
    app: Any
    redis: Any
    broker_url: str
    database_url: str
    store_kind: str
    worker: Any
    redis_pid: int | None = None


@contextmanager
def run_store_url(kind: str) -> Iterator[str]:
    """A fresh, migrated run store of ``kind`` (``sqlite`` or ``postgres``) for the block."""
    from agentloop.orchestration.store import open_store

    if kind == "postgres":
        from tests.services.postgres import PostgresUnavailableError, private_postgres_database

        try:
            manager = private_postgres_database()
            url = manager.__enter__()
        except PostgresUnavailableError as error:
            raise NotRunnable(f"no PostgreSQL: {error}") from error
        try:
            store, _ = open_store(url)
            store.engine.dispose()
            yield url
        finally:
            manager.__exit__(None, None, None)
        return
    if kind != "sqlite":
        raise ValueError(f"{STORE_ENV} must be sqlite or postgres, not {kind!r}")
    with tempfile.TemporaryDirectory(prefix="agentloop-bench-") as folder:
        url = f"sqlite:///{Path(folder) / 'runs.sqlite3'}"
        store, _ = open_store(url)
        store.engine.dispose()
        yield url


def _worker_env(database_url: str, stages: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        "DATABASE_URL": database_url,
        "AGENTLOOP_BENCH_PIPELINES": str(stages),
        "AGENTLOOP_BENCH_WORKER": "1",
        "PYTHONPATH": str(ROOT),
    }
    env.update(extra or {})
    return env


@contextmanager
def rig(*, store_kind: str, stages: int, worker_env: dict[str, str] | None = None) -> Iterator[Rig]:
    """A private Redis, a run store, a prefork worker importing the benchmark module, a client app."""
    import redis

    from agentloop import create_app, load_settings
    from tests.services.redis_server import ServiceUnavailable, private_redis_server
    from tests.services.worker import run_worker_process

    with ExitStack() as stack:
        try:
            server = stack.enter_context(private_redis_server())
        except ServiceUnavailable as unavailable:
            raise NotRunnable(unavailable.reason) from unavailable
        database_url = stack.enter_context(run_store_url(store_kind))
        worker = stack.enter_context(
            run_worker_process(
                broker_url=server.url,
                result_backend=server.url,
                imports=[WORKFLOWS_MODULE],
                env=_worker_env(database_url, stages, worker_env),
                concurrency=CONCURRENCY,
                loglevel="WARNING",
            )
        )
        client_env = {"BROKER_URL": server.url, "RESULT_BACKEND": server.url, "DATABASE_URL": database_url}
        app = create_app(settings=load_settings(client_env))
        stack.callback(app.close)
        stack.callback(_detach_result_consumer, app)
        client = redis.Redis.from_url(server.url)
        stack.callback(client.close)
        redis_pid = int(client.info("server").get("process_id", 0)) or None
        yield Rig(
            app=app,
            redis=client,
            broker_url=server.url,
            database_url=database_url,
            store_kind=store_kind,
            worker=worker,
            redis_pid=redis_pid,
        )


def _detach_result_consumer(app: Any) -> None:
    """Close the result consumer's pub/sub before the private Redis goes away (no retry noise)."""
    consumer = getattr(app.backend, "result_consumer", None)
    pubsub = getattr(consumer, "_pubsub", None)
    if consumer is not None and pubsub is not None:
        with contextlib.suppress(Exception):
            pubsub.close()
        consumer._pubsub = None

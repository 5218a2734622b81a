"""A key's branch limit across two prefork worker processes (a private Redis broker and result
backend, one SQLite run store): the branches of the key's runs in flight are counted in Redis by
the branches themselves, never more than the limit across both workers, each branch once. Counted,
never timed; every wait is bounded."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import pytest
import redis
from sqlalchemy import func, select

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.store import open_store
from agentloop.orchestration.store.tables import concurrency_slots
from tests.services.redis_server import RedisServer
from tests.services.worker import run_worker_process
from tests.services.worker_environment import detach_result_consumer, redis_fixture, worker_pythonpath

CEILING = 90.0

redis_server = redis_fixture("module")


@pytest.fixture(scope="module")
def rig(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two prefork workers (concurrency 2 each: four slots for a limit of two)."""
    import workflows.branch_limits  # noqa: F401  (registers the workflow in the test process too)

    database_url = f"sqlite:///{tmp_path_factory.mktemp('branch-limits') / 'runs.sqlite3'}"
    store, _ = open_store(database_url)
    queue = f"branch-limits-{uuid.uuid4().hex[:8]}"
    env = {
        "DATABASE_URL": database_url,
        "PYTHONPATH": worker_pythonpath(),
        "AGENTLOOP_TASK_DEFAULT_QUEUE": queue,
    }
    managers = [
        run_worker_process(
            broker_url=redis_server.url,
            result_backend=redis_server.url,
            imports=["workflows.branch_limits"],
            env=env,
            concurrency=2,
        )
        for _ in range(2)
    ]
    with ExitStack() as stack:
        with ThreadPoolExecutor(max_workers=2) as pool:
            starts = [pool.submit(manager.__enter__) for manager in managers]
        workers = []
        for manager, start in zip(managers, starts, strict=True):
            if start.exception() is None:
                stack.push(manager.__exit__)
                workers.append(start.result())
        for start in starts:
            error = start.exception()
            if error is not None:
                raise error
        stack.callback(lambda: [worker.kill(signal.SIGTERM, group=False) for worker in workers])
        app = create_app(
            overrides={
                "broker_url": redis_server.url,
                "result_backend": redis_server.url,
                "task_default_queue": queue,
            }
        )
        stack.callback(app.close)
        stack.callback(detach_result_consumer, app)
        stack.callback(store.engine.dispose)
        yield {"app": app, "store": store, "redis": redis_server.url}


def parked(store: Any, key: str) -> int:
    slots = concurrency_slots.c
    query = select(func.count()).where(slots.kind == "branch", slots.key == key, slots.state == "waiting")
    with store.engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


def test_two_workers_hold_no_more_of_a_keys_branches_than_its_branch_limit(rig: dict[str, Any]) -> None:
    client = redis.Redis.from_url(rig["redis"], decode_responses=True)
    ns = f"branches-{uuid.uuid4().hex[:8]}"
    runner = CeleryAgentRunner.create(runnable="branch_limits.fan", app=rig["app"], store=rig["store"])
    handles = [
        runner.request_sync(input={"redis": rig["redis"], "ns": ns, "run": run}, concurrency_key="T")
        for run in ("first", "second")
    ]
    deadline = time.monotonic() + CEILING
    # two inside, fourteen parked in the store: the four worker slots are free for others
    while not (int(client.get(f"{ns}:inside") or 0) == 2 and parked(rig["store"], "T") == 14):
        assert int(client.get(f"{ns}:inside") or 0) <= 2, "more branches in flight than the limit"
        assert time.monotonic() < deadline, (client.get(f"{ns}:inside"), parked(rig["store"], "T"))
        time.sleep(0.05)
    client.rpush(f"{ns}:release", *range(16))
    for handle in handles:
        handle.wait_sync(timeout=CEILING)
    assert max(int(seen) for seen in client.lrange(f"{ns}:seen", 0, -1)) == 2
    entries = client.hgetall(f"{ns}:entries")
    assert entries == {f"{run}/{n}": "1" for run in ("first", "second") for n in range(8)}

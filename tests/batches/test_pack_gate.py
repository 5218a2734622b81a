"""A prefork worker keeps one process from packs (``celery_adapter/pack_gate.py``): with ``-c 2``
it runs three processes, at most two packs at once, and a run launched while its packs hold
them runs on the third at once, instead of waiting in the broker for a pack to end.

The packed runs (``gate.held``) hold their packs until the test writes the file they wait for:
the verdicts are counts and the order of events, never times (the waits are ceilings)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.batches import summarize
from agentloop.orchestration.store import open_store
from agentloop.orchestration.wire import BATCH, LAUNCH
from tests.services.redis_server import ServiceUnavailable, private_redis_server
from tests.services.worker import run_worker_process

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent
T = TypeVar("T")


def wait_for(check: Callable[[], T | None], *, ceiling: float, what: str) -> T:
    deadline = time.monotonic() + ceiling  # a ceiling: the verdicts are counts
    while time.monotonic() < deadline:
        found = check()
        if found is not None:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {ceiling} s")


def test_a_launch_runs_while_packs_hold_every_process_they_may_take(tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    store, _ = open_store(database_url)
    release = tmp_path / "release"
    env = {"DATABASE_URL": database_url, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    try:
        server_cm = private_redis_server()
        server = server_cm.__enter__()
    except ServiceUnavailable as unavailable:
        pytest.skip(unavailable.reason)
    try:
        with run_worker_process(
            broker_url=server.url, result_backend=server.url, imports=["workflows.pack_gate"],
            env=env, concurrency=2, pool="prefork",
        ) as worker:  # fmt: skip
            app = create_app(overrides={"broker_url": server.url, "result_backend": server.url})
            try:
                stats = app.control.inspect([worker.hostname], timeout=10).stats()[worker.hostname]
                assert len(stats["pool"]["processes"]) == 3  # -c 2, and one kept from packs
                batch_id = app.send_task(
                    BATCH,
                    kwargs={
                        "runnable": "gate.held",
                        "inputs": list(range(12)),
                        "chunk_size": 4,  # three chunks, each one pack of four runs
                        "context": {"release": str(release)},
                        "poll_seconds": 0.2,
                    },
                ).get(timeout=30)["batch_id"]

                def running() -> int:
                    return int(summarize(store, batch_id)["by_status"].get("running", 0))

                wait_for(lambda: True if running() >= 8 else None, ceiling=60, what="two packs running")
                # while two packs hold their processes, a launch runs on the third
                launch = app.send_task(LAUNCH, kwargs={"runnable": "gate.quick", "input": 7})
                assert launch.get(timeout=60) == 7
                # and the third pack was not taken meanwhile: it waits for a pack's process
                assert running() == 8
                assert int(summarize(store, batch_id)["by_status"].get("pending", 0)) == 4
                release.write_text("go")
                state = wait_for(
                    lambda: s if (s := summarize(store, batch_id))["open"] == 0 else None,
                    ceiling=60,
                    what="the batch's runs ended",
                )
            finally:
                app.close()
    finally:
        server_cm.__exit__(None, None, None)
        store.engine.dispose()
    assert (state["total"], state["succeeded"]) == (12, 12)

"""A 5 s Redis outage (broker and results) while a pipeline's stage runs on a real worker: the stage
finishes during it, and the run goes on once Redis is back, with no wait for the visibility timeout.

Before (issue 21, item 3): the publish of the chain's next task gave up after about 1 s and failed
the run with ``OperationalError``, or the worker cancelled the running stage on the lost connection
and its message came back only after the visibility timeout (1,260 s by default).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.store import RunRecord, SqlRunStore, open_store
from agentloop.orchestration.wire import LAUNCH
from tests.services.redis_server import RedisServer
from tests.services.worker import run_worker_process

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parent.parent
OUTAGE_SECONDS = 5.0


def _ended(store: SqlRunStore, run_id: str, *, timeout: float) -> RunRecord | None:
    deadline = time.monotonic() + timeout  # a timeout only: far below the visibility timeout
    record = store.get_run(run_id)
    while (record is None or not record.is_finished) and time.monotonic() < deadline:
        time.sleep(0.2)
        record = store.get_run(run_id)
    return record


def _wait_for(path: Path, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def test_a_stage_that_finishes_during_a_redis_outage_carries_its_run_on(
    restartable_redis: RedisServer, tmp_path: Path
) -> None:
    database_url, log = f"sqlite:///{tmp_path / 'runs.sqlite3'}", tmp_path / "iterations.log"
    ready, go = tmp_path / "ready", tmp_path / "go"
    store, _ = open_store(database_url)
    env = {"DATABASE_URL": database_url, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    url = restartable_redis.url
    try:
        with run_worker_process(
            broker_url=url,
            result_backend=url,
            imports=["workflows.durable"],
            env=env,
            concurrency=2,
        ) as worker:
            app = create_app(overrides={"broker_url": url, "result_backend": url})
            run_id = f"run-{uuid.uuid4().hex}"
            context = {"step_seconds": 0.01, "log": str(log), "ready": str(ready), "go": str(go)}
            app.send_task(
                LAUNCH, kwargs={"runnable": "durable.waits_then_counts", "input": 3, "context": context},
                task_id=run_id,
            )  # fmt: skip
            _wait_for(ready, timeout=60)
            restartable_redis.stop()
            go.touch()  # the first stage ends now, while Redis is away
            time.sleep(OUTAGE_SECONDS)
            restartable_redis.start()
            app.close()

            record = _ended(store, run_id, timeout=90)
            assert record is not None and (record.status, record.output, record.error) == (
                "succeeded",
                {"counted": 3},
                None,
            ), worker.log_text()[-3000:]
            assert log.read_text().split()[::2] == ["0", "1", "2"]  # the second stage's steps, once each
            assert worker.is_alive()
    finally:
        store.engine.dispose()

"""A 5 s Redis outage (broker and results) while a pipeline's stage runs on a real worker: the stage
finishes during it, and the run goes on once Redis is back, with no wait for the visibility timeout.

Before (issue 21, item 3): the publish of the chain's next task gave up after about 1 s and failed
the run with ``OperationalError``, or the worker cancelled the running stage on the lost connection
and its message came back only after the visibility timeout (1,260 s by default).

The same outage while a composite's task replaces itself with the chord of its branches: the run
ends with every branch, each run once. Before, ``Task.replace`` gave up at once there (the retry
was the joined stages' alone): the task failed with ``OperationalError``, and the run with it.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

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


def _through_an_outage(
    redis: RedisServer, folder: Path, runnable: str, input: Any
) -> tuple[RunRecord | None, list[list[str]], str]:
    """Launch ``runnable`` on a real worker; once it wrote the file ``ready`` (context), stop Redis
    and write ``go``, then start Redis again 5 s later: the run's record once it ended, the lines
    its steps logged, and the worker's log."""
    database_url, log = f"sqlite:///{folder / 'runs.sqlite3'}", folder / "iterations.log"
    ready, go = folder / "ready", folder / "go"
    store, _ = open_store(database_url)
    env = {"DATABASE_URL": database_url, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    url = redis.url
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
            launch = {"runnable": runnable, "input": input, "context": context}
            app.send_task(LAUNCH, kwargs=launch, task_id=run_id)
            _wait_for(ready, timeout=60)
            redis.stop()
            go.touch()  # the step waiting for it ends now, while Redis is away
            time.sleep(OUTAGE_SECONDS)
            redis.start()
            app.close()

            record = _ended(store, run_id, timeout=90)
            assert worker.is_alive()
            lines = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
            return record, lines, worker.log_text()[-3000:]
    finally:
        store.engine.dispose()


def test_a_stage_that_finishes_during_a_redis_outage_carries_its_run_on(
    restartable_redis: RedisServer, tmp_path: Path
) -> None:
    record, lines, worker_log = _through_an_outage(
        restartable_redis, tmp_path, "durable.waits_then_counts", 3
    )

    assert record is not None and (record.status, record.output, record.error) == (
        "succeeded",
        {"counted": 3},
        None,
    ), worker_log
    assert [line[0] for line in lines] == ["0", "1", "2"]  # the second stage's steps, once each


@pytest.mark.parametrize("width", [1, 3], ids=["chain", "chord"])
def test_a_composite_that_expands_during_a_redis_outage_runs_every_branch_once(
    restartable_redis: RedisServer, tmp_path: Path, width: int
) -> None:
    goal = 2
    record, lines, worker_log = _through_an_outage(
        restartable_redis, tmp_path, "durable.waits_then_fans", {"width": width, "goal": goal}
    )

    assert record is not None and (record.status, record.output, record.error) == (
        "succeeded",
        [{"counted": goal}] * width,
        None,
    ), worker_log
    # every branch's every step, once each: none lost, none run twice
    ran = sorted((key, int(iteration)) for key, iteration, _ in lines)
    assert ran == [(str(key), step) for key in range(width) for step in range(goal)]

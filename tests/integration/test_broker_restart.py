"""A Redis restart in the middle of a run (broker and results on it, AOF on) loses nothing:
the worker reconnects, the task that was running goes on, and the run's result arrives. A
message whose acknowledgement died with the old connection is delivered again after the
visibility timeout, and the steps that already finished are not run again (at-least-once delivery).

It keeps the kombu workaround in ``orchestration/celery_adapter/patches.py`` honest: the worker applies
it when it starts (the test process, a client, does not), and without it the restore of unacknowledged
messages on the dead connection, and the acknowledgement of the task that ran through the restart, are
an "Unrecoverable error" that stops the worker."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.store import open_store
from tests.services.redis_server import ServiceUnavailable, private_redis_server
from tests.services.worker import run_worker_process

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parent.parent


def test_a_run_survives_a_broker_restart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import workflows.durable
    import workflows.parity  # noqa: F401

    monkeypatch.delenv("AGENTLOOP_TEST_REDIS_URL", raising=False)  # a server this test can restart
    database_url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    store, _ = open_store(database_url)
    try:
        server_cm = private_redis_server(appendonly=True)
        server = server_cm.__enter__()
    except ServiceUnavailable as unavailable:
        pytest.skip(unavailable.reason)
    env = {
        "DATABASE_URL": database_url,
        "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)]),
        # Messages whose acknowledgement was lost with the old connection come back soon.
        # (the time limits leave room for a result store retried while Redis restarts)
        "AGENTLOOP_TASK_SOFT_TIME_LIMIT": "12",
        "AGENTLOOP_TASK_TIME_LIMIT": "14",
        "AGENTLOOP_VISIBILITY_TIMEOUT": "15",
        "AGENTLOOP_UNACKED_RESTORE_SECONDS": "1",
    }
    try:
        with run_worker_process(
            broker_url=server.url,
            result_backend=server.url,
            imports=["workflows.durable", "workflows.parity"],
            env=env,
            concurrency=2,
        ) as worker:
            app = create_app(overrides={"broker_url": server.url, "result_backend": server.url})
            runner = CeleryAgentRunner.create(runnable="parity.fan_of_pipelines", app=app, store=store)
            slow = CeleryAgentRunner.create(
                runnable="durable.slow_count", context={"step_seconds": 0.2}, app=app, store=store
            ).request_sync(input=10)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not any(
                e.get("phase") == "iteration" and e["iteration"] >= 4 for _, e in store.events(slow.run_id)
            ):
                time.sleep(0.05)
            server.restart()  # mid-run: the slow loop has a checkpoint and is between iterations
            assert slow.wait_sync(timeout=90) == {"counted": 10}
            # the task that was running went on through the restart (it is not cancelled on a
            # lost connection: config.py): iteration 0 started once, and each iteration ran once
            phases = [(e["phase"], e["iteration"]) for _, e in store.events(slow.run_id) if e["path"] == ""]
            iterations = [n for phase, n in phases if phase == "iteration"]
            assert [phase for phase, _ in phases].count("start") == 1
            assert iterations == sorted(set(iterations))
            after = runner.request_sync(input=3)  # the worker is still there for new work
            assert after.wait_sync(timeout=60) == [
                {"key": f"p{i}", "ok": True, "output": i * 10 + 6, "error": None} for i in range(3)
            ]
            assert worker.is_alive()
            assert "Unrecoverable error" not in worker.log_text()
            app.close()
    finally:
        server_cm.__exit__(None, None, None)

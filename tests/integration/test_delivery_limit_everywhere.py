"""The delivery limit on every broker (issue 33, item 2): the run store counts each start of a loop,
so a message that kills its process on every delivery ends its run ``failed`` with
``DeliveryLimitError`` on Redis too (kombu gives a Redis message no delivery count), after
``AGENTLOOP_DELIVERY_LIMIT`` deliveries, and the worker goes on. RabbitMQ's own count is
``tests/integration/test_rabbitmq_quorum.py``."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from agentloop.orchestration.client import CeleryAgentRunner
from tests.services.worker_environment import WorkerEnvironment

pytestmark = pytest.mark.integration

LIMIT = 2


def _until(check: Any, timeout: float, what: str, log: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s" + (
            "" if log is None else f"\n{log()[-3000:]}"
        )
        time.sleep(0.1)


def test_on_redis_a_loop_that_kills_its_process_ends_failed_at_the_delivery_limit(
    tmp_path: Path,
) -> None:
    import workflows.durable
    import workflows.parity  # noqa: F401

    env = {
        "AGENTLOOP_DELIVERY_LIMIT": str(LIMIT),
        "AGENTLOOP_TASK_SOFT_TIME_LIMIT": "5",
        "AGENTLOOP_TASK_TIME_LIMIT": "6",
        "AGENTLOOP_VISIBILITY_TIMEOUT": "7",
        "AGENTLOOP_UNACKED_RESTORE_SECONDS": "1",
    }
    with ExitStack() as stack:
        services = WorkerEnvironment.start(stack, tmp_path, env=env)
        worker = services.start_worker(["workflows.parity", "workflows.durable"])
        app, store = services.client(), services.store
        runner = CeleryAgentRunner.create(runnable="durable.kills_its_process", app=app, store=store)
        handle = runner.request_sync(input=1)

        def ended() -> bool:
            record = store.get_run(handle.run_id)
            return record is not None and record.is_finished

        _until(ended, 90, "the poisoned run's end", worker.log_text)
        record = store.get_run(handle.run_id)
        assert record is not None and record.status == "failed", record
        assert record.error["type"] == "DeliveryLimitError", record.error
        assert f"delivery limit {LIMIT}" in record.error["message"]
        _until(lambda: app.AsyncResult(handle.run_id).state == "FAILURE", 30, "the poisoned run's result")
        kills = worker.log_text().count("exited with 'signal 9 (SIGKILL)'")
        assert kills == LIMIT, f"{kills} pool processes killed: one per delivery up to the limit"

        # the worker goes on
        after = CeleryAgentRunner.create(runnable="parity.count", app=app, store=store)
        assert after.request_sync(input=2).wait_sync(timeout=60) is not None
        assert worker.is_alive()

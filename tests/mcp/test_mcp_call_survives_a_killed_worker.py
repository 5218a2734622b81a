"""A completed MCP call is part of the branch's checkpoint (issue 37, item 2): a worker process
killed (SIGKILL) after the call and before the loop's end resumes on redelivery without calling
the tool again, counted at the server. A real prefork worker on a private Redis."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from agentloop.orchestration.client import CeleryAgentRunner
from tests.services.worker_environment import WorkerEnvironment

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent


def test_a_worker_killed_after_the_call_resumes_without_calling_the_tool_again(
    tmp_path: Path,
) -> None:
    import mcp_workflows  # noqa: F401

    calls, arm = tmp_path / "calls.txt", tmp_path / "arm"
    arm.touch()
    env = {
        "AGENTLOOP_TASK_SOFT_TIME_LIMIT": "20",
        "AGENTLOOP_TASK_TIME_LIMIT": "25",
        "AGENTLOOP_VISIBILITY_TIMEOUT": "26",
        "AGENTLOOP_UNACKED_RESTORE_SECONDS": "1",
    }
    with ExitStack() as stack:
        services = WorkerEnvironment.start(stack, tmp_path, env=env, paths=[HERE])
        worker = services.start_worker(["mcp_workflows"])
        app, store = services.client(), services.store
        runner = CeleryAgentRunner.create(runnable="mcp.adds_then_may_die", app=app, store=store)
        handle = runner.request_sync(input={"calls": str(calls), "arm": str(arm)})

        deadline = time.monotonic() + 120
        while not ((record := store.get_run(handle.run_id)) and record.is_finished):
            assert time.monotonic() < deadline, f"the run did not end\n{worker.log_text()[-3000:]}"
            time.sleep(0.2)

        assert record.status == "succeeded", (record, worker.log_text()[-3000:])
        assert handle.wait_sync(timeout=30) == {"sum": 42}
        assert not arm.exists()  # the process was killed once, after its call
        assert worker.log_text().count("exited with 'signal 9 (SIGKILL)'") == 1
        assert calls.read_text().splitlines()[0].startswith("add ")
        assert len(calls.read_text().splitlines()) == 1  # the tool was called once, not again
        assert record.tool_calls == 1  # the run's usage counts that one call, not the resumed read
        assert handle.usage is not None and handle.usage["tool_calls"] == 1

"""The Celery runner has the inline runner's call shape: ``await request(input=..., on_progress=...)``
returns a handle whose ``wait`` streams the run's events to ``on_progress``."""

from __future__ import annotations

import asyncio
from typing import Any

from workflows.parity import ThreeStages

from agentloop.actions import RunStoppedError
from agentloop.loops import ProgressEvent
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.runtime.run_end import failure_status


def test_request_and_wait_stream_every_event_to_on_progress(memory_celery: Any) -> None:
    seen: list[ProgressEvent] = []

    async def main() -> Any:
        runner = CeleryAgentRunner.create(
            runnable=ThreeStages, app=memory_celery.app, store=memory_celery.store
        )
        handle = await runner.request(input=1, on_progress=seen.append)
        return handle, await handle.wait(timeout=30)

    handle, result = asyncio.run(main())
    assert result == 17
    assert [e.status for e in seen if e.path == ""] == [
        "started",
        "progress",
        "progress",
        "progress",
        "completed",
    ]
    assert {e.run_id for e in seen} == {handle.run_id}
    assert handle.progress() == seen[-1]


def test_a_stop_without_a_final_status_of_its_own_ends_the_run_as_failed() -> None:
    assert failure_status(RunStoppedError("stopped")) == "failed"
    assert failure_status(ValueError("x")) == "failed"
    from agentloop.actions import RunCancelledError, TokenBudgetExceededError

    assert failure_status(RunCancelledError("c")) == "cancelled"
    assert failure_status(TokenBudgetExceededError(used=2, budget=1)) == "budget_exceeded"

"""Helpers of the human-in-the-loop tests: start a run, wait for its status, answer it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentloop.orchestration.client import CeleryAgentRunner, RunHandle
from agentloop.orchestration.store import SqlRunStore
from agentloop.orchestration.store.waits import SqlWaitStore, Wait
from agentloop.orchestration.wire import RESUME


def start(app: Any, store: SqlRunStore, name: str, input: Any = None) -> RunHandle:
    return CeleryAgentRunner.create(runnable=name, app=app, store=store).request_sync(input=input)


def wait_for_status(store: SqlRunStore, run_id: str, status: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = store.get_run(run_id)
        if record is not None and record.status == status:
            return
        time.sleep(0.05)
    record = store.get_run(run_id)
    raise AssertionError(f"run {run_id} is {None if record is None else record.status}, not {status}")


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.05)


def waits(store: SqlRunStore, run_id: str) -> list[Wait]:
    return SqlWaitStore(store.engine).waits(run_id)


def answer(app: Any, run_id: str, value: Any, **where: Any) -> dict[str, Any]:
    """What ``agentloop.resume`` answers for ``value``."""
    result: dict[str, Any] = app.send_task(RESUME, kwargs={"run_id": run_id, "answer": value, **where}).get(
        timeout=30
    )
    return result


def phases_at(store: SqlRunStore, run_id: str, path: str) -> list[tuple[str, dict[str, Any]]]:
    return [(event["phase"], event["data"]) for _, event in store.events(run_id) if event["path"] == path]

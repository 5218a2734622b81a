"""Only the tasks a client sends write a ``STARTED`` state to the result backend: the framework's
internal tasks (whose ids only its canvases hold) skip that write, two Redis round trips a task that
nothing reads; Flower still sees them start through their ``task-started`` events."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agentloop.orchestration.celery_adapter.tasks import INTERNAL_TASKS
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.wire import CANCEL, LAUNCH, PACK, PROGRESS, RESUME


def test_every_internal_task_is_registered_without_started_tracking_and_the_client_facing_ones_with_it(
    memory_celery: Any,
) -> None:
    tasks = memory_celery.app.tasks
    assert all(tasks[name].track_started is False for name in INTERNAL_TASKS)
    assert all(tasks[name].track_started is True for name in (LAUNCH, PROGRESS, CANCEL, RESUME))


def test_a_composite_run_writes_started_for_its_launch_and_for_no_internal_task(
    memory_celery: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = memory_celery.app.backend
    written: list[tuple[str, str]] = []
    lock = threading.Lock()
    # on the class: each worker thread has a backend object of its own (Celery's app.backend is per thread)
    store_result = type(backend)._store_result

    def recording(self: Any, task_id: str, result: Any, state: str, *args: Any, **kwargs: Any) -> Any:
        request = kwargs.get("request")
        with lock:
            written.append((str(getattr(request, "task", None) or ""), state))
        return store_result(self, task_id, result, state, *args, **kwargs)

    monkeypatch.setattr(type(backend), "_store_result", recording)
    handle = CeleryAgentRunner.create(
        runnable="parity.fan", app=memory_celery.app, store=memory_celery.store
    ).request_sync(input=[1, 2, 3])
    assert handle.wait_sync(timeout=30)["keys"] == ["0", "1", "2"]

    started = {name for name, state in written if state == "STARTED"}
    succeeded = {name for name, state in written if state == "SUCCESS"}
    assert started == {LAUNCH}
    # the internal tasks did write their ends (the rule packs the fan's plain loops: one pack)
    assert {PACK, "agentloop.merge"} <= succeeded


def test_a_packs_progress_state_is_written_from_its_threads_not_its_event_loop(
    memory_celery: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pack's ``PROGRESS`` state (with the paths it runs) goes to the result backend from the
    pack's threads: on its event loop the round trip held every branch of the pack."""
    backend = memory_celery.app.backend
    seen: list[tuple[str, Any]] = []
    shown = threading.Event()
    store_result = type(backend)._store_result

    def recording(self: Any, task_id: str, result: Any, state: str, *args: Any, **kwargs: Any) -> Any:
        request = kwargs.get("request")
        if state == "PROGRESS" and getattr(request, "task", None) == PACK:
            seen.append((threading.current_thread().name, result))
            shown.set()
        return store_result(self, task_id, result, state, *args, **kwargs)

    monkeypatch.setattr(type(backend), "_store_result", recording)
    handle = CeleryAgentRunner.create(
        runnable="parity.packed_crawl_fan", app=memory_celery.app, store=memory_celery.store
    ).request_sync(input=2, deadline=30.0)
    try:
        assert shown.wait(timeout=30)  # a crawl's steps last past the state's interval
    finally:
        handle.cancel()
    with pytest.raises(Exception):  # noqa: B017 - cancelled
        handle.wait_sync(timeout=30)
    name, meta = seen[0]
    assert name.startswith("agentloop-pack"), name
    assert meta["pack"] == ["branch/0", "branch/1"] and meta["run_id"] == handle.run_id

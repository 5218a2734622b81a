"""A launch re-sent with the id of a run that was pruned starts a new run with that id, on the
same worker process that ran the first one (and cached its owner): it succeeds, never fails with
``RunOwnershipError`` (``orchestration/runtime/run_gate.py``; the choice is in ``store/retention.py``)."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentloop import CeleryAgentRunner
from agentloop.orchestration.store.retention import prune_runs

pytestmark = pytest.mark.integration


def test_a_launch_of_a_pruned_run_s_id_is_a_new_run_that_succeeds(lone_worker: Any) -> None:
    runner = CeleryAgentRunner.create(runnable="parity.fan", app=lone_worker.app, store=lone_worker.store)
    run_id = uuid.uuid4().hex
    first = runner.request_sync(input=[2, 3, 4], run_id=run_id)
    expected = first.wait_sync(timeout=60)
    pruned = prune_runs(lone_worker.store, before=datetime.now(UTC) + timedelta(seconds=1))
    assert run_id in pruned.first_ids and lone_worker.store.get_run(run_id) is None

    runner.request_sync(input=[2, 3, 4], run_id=run_id)  # the sender retried the launch
    # its handle's result is the first run's, still in the result backend: the store tells the new one's end

    record = ended(lone_worker.store, run_id)
    assert (record.status, record.output, record.error) == ("succeeded", expected, None)


def ended(store: Any, run_id: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while (record := store.get_run(run_id)) is None or not record.is_finished:
        assert time.monotonic() < deadline, f"run {run_id} is still {record and record.status}"
        time.sleep(0.05)
    return record

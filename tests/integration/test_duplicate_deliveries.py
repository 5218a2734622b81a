"""A copy of a run or pack message that is not flagged redelivered (a producer's retry, the
deferral path's crash window) reads what its twin left (issue 33, item 4): sent again on a real
worker after the first finished, no branch runs an iteration again and each branch reports one
end. The work is counted where it happens: each iteration of a ``durable.tallied`` loop appends a
line to a file."""

from __future__ import annotations

import json
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from agentloop.orchestration.client import CeleryAgentRunner
from tests.services.worker_environment import WorkerEnvironment

pytestmark = pytest.mark.integration

KEYS = ["a", "b", "c", "d", "e"]


def _until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.1)


@pytest.mark.parametrize("runnable", ["duplicate.fan", "duplicate.packed_fan"])
def test_an_unflagged_copy_of_a_finished_run_or_pack_message_repeats_no_work(
    tmp_path: Path, runnable: str
) -> None:
    import workflows.delivery

    log, capture = tmp_path / "iterations.log", tmp_path / "published.jsonl"
    with ExitStack() as stack:
        services = WorkerEnvironment.start(stack, tmp_path, env={workflows.delivery.CAPTURE: str(capture)})
        worker = services.start_worker(["workflows.delivery"])
        app, store = services.client(), services.store
        runner = CeleryAgentRunner.create(runnable=runnable, context={"log": str(log)}, app=app, store=store)
        handle = runner.request_sync(input=KEYS)
        assert [item["id"] for item in handle.wait_sync(timeout=90)] == KEYS
        messages = [json.loads(line) for line in capture.read_text().splitlines()]
        assert messages, "no run or pack message was published"
        before = log.read_text().splitlines()

        with app.producer_or_acquire() as producer:
            for message in messages:  # the same bodies and headers, sent again: not redelivered
                producer.publish(
                    message["body"],
                    exchange=message["exchange"],
                    routing_key=message["routing_key"],
                    headers=message["headers"],
                    serializer="json",
                    **message["properties"],
                )
        ids = [message["headers"]["id"] for message in messages]

        def copies_done() -> bool:
            # a copy ends as its twin did ("succeeded"), or is turned away by the run gate for a run
            # that has ended ("runs nothing", then ignored: no "succeeded" line), whichever the gate's
            # half-second memory of the run makes it (runtime/run_gate.py)
            text = worker.log_text()
            return all(
                text.count(f"[{task_id}] succeeded") + text.count(f"[{task_id}] runs nothing") >= 2
                for task_id in ids
            )

        _until(copies_done, 90, "the copies' tasks")
        lines = log.read_text().splitlines()
        events = [event for _, event in store.events(handle.run_id)]

    assert lines == before, "a copy ran iterations again"
    assert Counter(line.split()[0] for line in lines) == {key: 3 for key in KEYS}
    ends = Counter(e["path"] for e in events if e["phase"] == "done" and e["status"] == "completed")
    branches = {path: count for path, count in ends.items() if path.startswith("branch/")}
    assert branches == {f"branch/{key}": 1 for key in KEYS}, ends

"""A pipeline's loop stages run one after another in one task (its launch, which runs them as an
``agentloop.stages`` task would) on a real prefork worker over Redis
(``docs/how-to/packing.md#pipelines``): each stage recorded as it ends,
so a pool process SIGKILLed in the middle of the run is sent again and resumes at the stage in
flight, never running the stages before it again (counted from the stages' own log, never
timed); a cancel stops the run between two stages; ``pack_size = 1`` keeps a task per stage.
Failures mid-run, collected or not, are in the parity suite (``tests/parity``)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentloop.actions import RunCancelledError
from agentloop.orchestration.client import CeleryAgentRunner

pytestmark = pytest.mark.integration

#: ``parity.logged_stages``: eight stages, each adding one to its input.
STAGES = 8


def _lines(log: Path) -> list[tuple[int, int]]:
    """``(stage input, pid)`` per stage executed, in order."""
    if not log.exists():
        return []
    return [(int(value), int(pid)) for value, pid in (line.split() for line in log.read_text().splitlines())]


def _wait_for_lines(log: Path, count: int) -> list[tuple[int, int]]:
    deadline = time.monotonic() + 30  # a ceiling, never a verdict
    while time.monotonic() < deadline and len(_lines(log)) < count:
        time.sleep(0.01)
    lines = _lines(log)
    assert len(lines) >= count, lines
    return lines


def _launch(rig: Any, log: Path, step_seconds: float) -> Any:
    """``parity.logged_stages`` from 0, each stage's step ``step_seconds`` long, logging to ``log``."""
    runner = CeleryAgentRunner.create(
        runnable="parity.logged_stages",
        context={"log": str(log), "step_seconds": step_seconds},
        app=rig.app,
        store=rig.store,
    )
    return runner.request_sync(input=0)


def test_a_run_of_stages_killed_midway_resumes_at_the_stage_in_flight(
    redis_celery: Any, tmp_path: Path
) -> None:
    log = tmp_path / "stages.log"
    sent_on = received(redis_celery.worker.log_text(), "agentloop.stages[")
    handle = _launch(redis_celery, log, 0.15)
    before = _wait_for_lines(log, 3)
    (pid,) = {pid for _, pid in before}  # one task, one pool process, ran them all so far
    assert os.getpgid(pid) == redis_celery.worker.pid
    os.kill(pid, signal.SIGKILL)
    before = _lines(log)

    assert handle.wait_sync(timeout=60) == STAGES
    lines = _lines(log)
    executions = Counter(value for value, _ in lines)
    assert sorted(executions) == list(range(STAGES)), lines
    # every stage recorded before the kill kept its result: none of them ran again; only the one
    # that was ending as the process died (logged, maybe not yet recorded) may run once more
    for value, _ in before[:-1]:
        assert executions[value] == 1, lines
    assert executions[before[-1][0]] <= 2 and len(lines) <= STAGES + 1, lines
    assert all(pid != after for _, after in lines[len(before) :])
    # the launch ran the stages itself (``tasks.stages_here``); its message, delivered again after
    # the kill, resumed them: no task of their own, before or after
    text = redis_celery.worker.log_text()
    assert received(text, f"agentloop.launch[{handle.run_id}]") == 2
    assert received(text, "agentloop.stages[") == sent_on
    record = redis_celery.store.get_run(handle.run_id)
    assert record is not None and record.status == "succeeded"


def test_each_stage_of_the_run_reports_its_progress_and_records_its_result(
    redis_celery: Any, tmp_path: Path
) -> None:
    log = tmp_path / "stages.log"
    handle = _launch(redis_celery, log, 0)
    assert handle.wait_sync(timeout=60) == STAGES
    assert len({pid for _, pid in _lines(log)}) == 1  # all in one task

    events = [event for _, event in redis_celery.store.events(handle.run_id)]
    root = [(e["phase"], e["iteration"]) for e in events if e["path"] == ""]
    assert root == [("start", 0), *(("stage", i) for i in range(1, STAGES + 1)), ("done", STAGES)]
    for index in range(STAGES):
        path = f"pipeline/{index}"
        assert [e["status"] for e in events if e["path"] == path][-1] == "completed"
    records = redis_celery.store.loop_records(handle.run_id, [f"pipeline/{i}" for i in range(STAGES)])
    assert [(finished, result) for finished, result, _ in records] == [(True, i + 1) for i in range(STAGES)]


def test_a_cancel_stops_a_run_of_stages_between_two_stages(redis_celery: Any, tmp_path: Path) -> None:
    log = tmp_path / "stages.log"
    handle = _launch(redis_celery, log, 0.1)
    _wait_for_lines(log, 2)
    handle.cancel()
    with pytest.raises(RunCancelledError):
        handle.wait_sync(timeout=60)

    ran = len(_lines(log))
    assert ran < STAGES  # the stages after the cancel never ran
    record = redis_celery.store.get_run(handle.run_id)
    assert record is not None and record.status == "cancelled" and record.output is None
    root = [(e["phase"], e["status"]) for _, e in redis_celery.store.events(handle.run_id) if e["path"] == ""]
    assert root[0] == ("start", "started") and root[-1] == ("cancelled", "failed")


def test_a_pipeline_of_pack_size_1_runs_a_task_per_stage(redis_celery: Any) -> None:
    before = received(redis_celery.worker.log_text(), "agentloop.stages[")
    runner = CeleryAgentRunner.create(
        runnable="parity.one_stage_per_task", app=redis_celery.app, store=redis_celery.store
    )
    handle = runner.request_sync(input=1)
    assert handle.wait_sync(timeout=60) == 17  # as parity.three_stages
    text = redis_celery.worker.log_text()
    # "received" lines: a task is received before it runs, so an earlier test's are all in
    # ``before`` (its "succeeded" lines may still come after its result was read)
    assert received(text, "agentloop.stages[") == before
    assert received(text, "agentloop.stage[") >= 3


def received(log: str, task: str) -> int:
    """How many tasks named like ``task`` (``"agentloop.stage["``) the worker's log says it received."""
    return sum(1 for line in log.splitlines() if task in line and line.rstrip().endswith("received"))

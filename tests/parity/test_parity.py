"""The same workflows on the inline runner and on a real Celery worker over Redis give
identical results and identical per-path progress transcripts (run ids and times aside).

Branches run concurrently on both runners, so only the order of events *within*
a path is defined; :meth:`ProgressRecorder.transcript` groups by path.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from parity_support import PARITY, run_inline, run_on_celery

from agentloop.actions import RunCancelledError
from agentloop.loops import CancellationToken, InlineAgentRunner, ProgressEvent
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.testing import ProgressRecorder

pytestmark = pytest.mark.integration


SCENARIOS = [
    pytest.param("parity.three_stages", 1, None, id="pipeline-of-3-stages"),
    pytest.param("parity.fan", list(range(20)), None, id="composite-of-20-branches"),
    pytest.param("parity.fan_after_stage", 2, None, id="composite-in-pipeline-width-from-previous-stage"),
    pytest.param("parity.fan_of_pipelines", 3, None, id="pipelines-in-composite"),
    pytest.param("parity.fan", [], None, id="composite-of-width-0"),
    pytest.param("parity.fan", [7], None, id="composite-of-width-1"),
    pytest.param("parity.collecting_fan", None, None, id="failing-branch-collected"),
    pytest.param("parity.fail_fast_fan", None, ["", "branch/bad"], id="failing-branch-fail-fast"),
    pytest.param(
        "parity.pipeline_over_fail_fast",
        1,
        ["", "pipeline/0", "pipeline/1", "pipeline/1/branch/bad"],
        id="fail-fast-inside-pipeline",
    ),
    pytest.param("parity.bounded", 5, None, id="loop-hits-its-bound"),
    pytest.param("parity.packed_fan", list(range(20)), None, id="packed-4-in-2-lanes"),
    pytest.param("parity.packed_wide_fan", list(range(20)), None, id="packed-4-unbounded"),
    pytest.param("parity.packed_wide_fan", [7], None, id="packed-width-1"),
    pytest.param("parity.packed_collecting_fan", None, None, id="packed-failing-branch-collected"),
    pytest.param("parity.packed_fail_fast_fan", None, ["", "branch/bad"], id="packed-fail-fast"),
    pytest.param("parity.failing_midway", 1, None, id="stages-in-one-task-failing-midway"),
    pytest.param("parity.collected_failing_stages", None, None, id="stages-failing-midway-collected"),
    pytest.param("parity.one_stage_per_task", 1, None, id="pipeline-pack-size-1"),
]


@pytest.mark.parametrize(("name", "input", "paths"), SCENARIOS)
def test_inline_and_celery_agree(redis_celery: Any, name: str, input: Any, paths: list[str] | None) -> None:
    inline = run_inline(name, input)
    distributed = run_on_celery(redis_celery, name, input)

    assert distributed.result == inline.result
    assert distributed.error == inline.error
    if paths is None:
        assert distributed.transcript == inline.transcript
    else:
        # Under fail-fast the siblings of the failing branch are cut short at a moment
        # that depends on timing (cancelled in-process, finishing on Celery): compare
        # the paths whose events are determined.
        assert {p: distributed.transcript[p] for p in paths} == {p: inline.transcript[p] for p in paths}


def test_the_composite_of_20_branches_really_fans_out(redis_celery: Any) -> None:
    outcome = run_on_celery(redis_celery, "parity.fan", list(range(20)))
    assert outcome.result == {"total": sum(range(20)) + 60, "keys": [str(i) for i in range(20)]}
    assert sorted(p for p in outcome.transcript if p.startswith("branch/")) == sorted(
        f"branch/{i}" for i in range(20)
    )


def test_a_cancelled_run_stops_on_both_runners(redis_celery: Any) -> None:
    token = CancellationToken()

    def cancel_on_first_step(event: ProgressEvent) -> None:
        if event.phase == "iteration":
            token.cancel()

    runner = InlineAgentRunner.create(runnable=PARITY.get("parity.slow_fan").runnable)
    recorder = ProgressRecorder()

    async def inline_run() -> None:
        await runner.request(
            input=3, cancel=token, on_progress=lambda e: (recorder(e), cancel_on_first_step(e))
        )

    with pytest.raises(RunCancelledError):
        asyncio.run(inline_run())

    handle = CeleryAgentRunner.create(
        runnable="parity.slow_fan", app=redis_celery.app, store=redis_celery.store
    )
    started = handle.request_sync(input=3)
    for event in started.events(timeout=30):
        if event.phase == "iteration":
            started.cancel()
            break
    with pytest.raises(RunCancelledError):
        started.wait_sync(timeout=30)

    celery_root = [(e[1], e[2]) for e in run_on_celery_events(redis_celery, started.run_id)[""]]
    inline_root = [(e[1], e[2]) for e in recorder.transcript()[""]]
    assert inline_root == celery_root == [("start", "started"), ("cancelled", "failed")]
    record = redis_celery.store.get_run(started.run_id)
    assert record is not None and record.status == "cancelled"


def run_on_celery_events(rig: Any, run_id: str) -> dict[str, list[tuple[Any, ...]]]:
    recorder = ProgressRecorder()
    for _, event in rig.store.events(run_id):
        recorder(ProgressEvent.from_dict(event))
    return recorder.transcript()


def test_a_cancel_reaches_every_packed_branch(redis_celery: Any) -> None:
    handle = CeleryAgentRunner.create(
        runnable="parity.packed_crawl_fan", app=redis_celery.app, store=redis_celery.store
    )
    started = handle.request_sync(input=3)
    for event in started.events(timeout=30):
        if event.phase == "iteration":
            started.cancel()
            break
    with pytest.raises(RunCancelledError):
        started.wait_sync(timeout=30)

    root = [(e[1], e[2]) for e in run_on_celery_events(redis_celery, started.run_id)[""]]
    assert root == [("start", "started"), ("cancelled", "failed")]
    # every branch stopped: none ran to its bound (400 steps), and the run records no result
    ends = [e for _, e in redis_celery.store.events(started.run_id) if e["path"].startswith("branch/")]
    assert {e["path"] for e in ends} == {"branch/0", "branch/1", "branch/2"}
    assert max(e["iteration"] for e in ends) < 40
    record = redis_celery.store.get_run(started.run_id)
    assert record is not None and record.status == "cancelled" and record.output is None

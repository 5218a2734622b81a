"""``max_concurrency``, the whole-run deadline and degraded runs hold on Celery as they do
inline: the same results, the same per-path events, the same recorded status."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from celery import Celery
from parity_support import most_at_once, run_inline, run_on_celery, shape

import agentloop
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.wire import DegradedError, DegradedResult

pytestmark = pytest.mark.integration


def test_a_composite_runs_at_most_max_concurrency_branches_at_once_on_both_runners(
    parity_celery: Any,
) -> None:
    inline = run_inline("parity.bounded_fan", 6)
    distributed = run_on_celery(parity_celery, "parity.bounded_fan", 6)

    assert inline.result == distributed.result == [0, 10, 20, 30, 40, 50]  # in branch order
    assert distributed.transcript == inline.transcript
    # six branches of 0.5 s each, two at a time, on a worker that could run four
    assert most_at_once(inline.events, "branch/") == 2
    assert most_at_once(distributed.events, "branch/") == 2


def test_a_bound_of_one_runs_the_branches_one_after_another(parity_celery: Any) -> None:
    inline = run_inline("parity.one_lane_fan", 3)
    distributed = run_on_celery(parity_celery, "parity.one_lane_fan", 3)

    assert inline.result == distributed.result == [0, 10, 20]
    assert distributed.transcript == inline.transcript
    assert most_at_once(inline.events, "branch/") == most_at_once(distributed.events, "branch/") == 1


def test_branches_that_expand_and_fail_keep_their_order_in_lanes(parity_celery: Any) -> None:
    inline = run_inline("parity.bounded_fan_of_pipelines", 3)
    distributed = run_on_celery(parity_celery, "parity.bounded_fan_of_pipelines", 3)

    assert distributed.result == inline.result
    assert [entry["key"] for entry in distributed.result] == ["p0", "p1", "p2", "bad"]
    assert [entry["ok"] for entry in distributed.result] == [True, True, True, False]
    assert distributed.transcript == inline.transcript


@pytest.mark.parametrize(
    ("name", "input"),
    [
        ("parity.crawl_after_count", 1),
        ("parity.crawl_fan", 3),
        ("parity.collecting_crawl_fan", 3),
        ("parity.packed_crawl_fan", 3),
    ],
    ids=["in-a-pipeline-stage", "in-every-branch", "never-collected-as-a-branch-failure", "in-a-pack"],
)
def test_the_whole_run_deadline_ends_the_run_on_both_runners(
    parity_celery: Any, name: str, input: Any
) -> None:
    inline = run_inline(name, input, deadline=1.0)
    distributed = run_on_celery(parity_celery, name, input, deadline=1.0)

    # the deadline cut every crawl short: none ran to its bound (400 steps of 0.05 s)
    for outcome in (inline, distributed):
        crawls = [e for e in outcome.events if e.runnable == "Crawl" and e.status == "failed"]
        assert crawls and all(e.iteration < e.max_iterations for e in crawls), crawls
    assert inline.error is not None and distributed.error is not None
    assert inline.error[0] == distributed.error[0] == "RunDeadlineExceededError"
    assert inline.status == distributed.status == "deadline_exceeded"
    assert shape(distributed) == shape(inline)
    assert shape(inline)[""][1] == ("deadline_exceeded", "failed")


@pytest.mark.parametrize("runnable", ["parity.crawl_fan", "parity.packed_crawl_fan"])
def test_every_task_of_a_run_sees_the_one_deadline(parity_celery: Any, runnable: str) -> None:
    handle = CeleryAgentRunner.create(
        runnable=runnable, app=parity_celery.app, store=parity_celery.store
    ).request_sync(input=3, deadline=1.0)
    with pytest.raises(Exception):  # noqa: B017 - the deadline, as parity above checks
        handle.wait_sync(timeout=60)

    ends = [
        event
        for _, event in parity_celery.store.events(handle.run_id)
        if event["path"].startswith("branch/") and event["status"] == "failed"
    ]
    assert {event["path"] for event in ends} == {"branch/0", "branch/1", "branch/2"}
    assert {event["phase"] for event in ends} == {"deadline_exceeded"}
    assert max(e["at"] for e in ends) - min(e["at"] for e in ends) < 1.0  # one deadline, not three


@pytest.mark.parametrize(
    ("name", "input"),
    [("parity.ask", "[down] why?"), ("parity.ask_all", ["a", "[down] b", "c"])],
    ids=["one-loop", "one-branch-of-three"],
)
def test_a_failed_model_call_degrades_the_run_on_both_runners(
    parity_celery: Any, name: str, input: Any
) -> None:
    inline = run_inline(name, input)
    distributed = run_on_celery(parity_celery, name, input)

    assert distributed.result == inline.result
    assert distributed.transcript == inline.transcript
    assert inline.status == distributed.status == "degraded"
    last = distributed.events[-1]
    assert (last.path, last.phase, str(last.status)) == ("", "degraded", "completed")
    assert [failure["action"] for failure in last.data["failures"]] == ["answer"]


def test_a_degraded_run_records_its_failures_and_its_task_result_says_so(parity_celery: Any) -> None:
    handle = CeleryAgentRunner.create(
        runnable="parity.ask_all", app=parity_celery.app, store=parity_celery.store
    ).request_sync(input=["a", "[down] b"])

    assert handle.wait_sync(timeout=60) == ["a", "the model is unavailable"]
    record = parity_celery.store.get_run(handle.run_id)
    assert record is not None and record.status == "degraded"
    assert record.output == ["a", "the model is unavailable"]
    assert record.error["type"] == "ModelUnavailable"
    assert record.error["failures"] == [
        {
            "action": "answer",
            "reason": "model error: openai: 503 server error after 4 attempts: upstream unavailable",
            "path": "branch/q1",
        }
    ]
    # What result.get() gives a client that imports only Celery, and what Flower's result shows.
    raw = handle.result.get(timeout=10)
    degraded = DegradedResult.from_wire(raw)
    assert degraded is not None and degraded.output == record.output
    assert raw["__agentloop_degraded__"]["status"] == "degraded"
    assert handle.error == record.error


def test_the_fail_policy_fails_the_run_on_both_runners(parity_celery: Any) -> None:
    inline = run_inline("parity.strict_ask", "[down] why?")
    distributed = run_on_celery(parity_celery, "parity.strict_ask", "[down] why?")

    assert inline.error == distributed.error
    assert inline.error is not None and inline.error[0] == "ModelUnavailableError"
    assert inline.status == distributed.status == "failed"
    assert distributed.transcript == inline.transcript


def test_a_healthy_model_run_succeeds_without_a_mark(parity_celery: Any) -> None:
    distributed = run_on_celery(parity_celery, "parity.ask_all", ["a", "b"])

    assert distributed.result == ["a", "b"]
    assert distributed.status == "succeeded"
    assert all(event.phase not in ("degraded", "model_unavailable") for event in distributed.events)


def test_a_raw_celery_client_reads_a_degraded_run_in_the_typed_shape(parity_celery: Any) -> None:
    broker = str(parity_celery.app.conf.broker_url)
    client = Celery(broker=broker, backend=str(parity_celery.app.conf.result_backend))  # only celery
    client.conf.task_default_queue = parity_celery.app.conf.task_default_queue
    run_id = str(uuid.uuid4())
    try:
        result = client.send_task(
            "agentloop.launch",
            kwargs={"runnable": "parity.ask_all", "input": ["a", "[down] b"], "run_id": run_id},
            task_id=run_id,
        )
        raw = result.get(timeout=60)
        page = client.send_task("agentloop.progress", kwargs={"run_id": run_id, "after_id": 0}).get(
            timeout=30
        )
    finally:
        client.close()

    body = raw["__agentloop_degraded__"]  # the wire contract's key
    assert set(body) == set(agentloop.DegradedBody.__annotations__) == {"status", "output", "error"}
    assert set(body["error"]) == set(DegradedError.__annotations__)
    assert body["status"] == page["status"] == parity_celery.store.get_run(run_id).status == "degraded"
    assert body["error"] == page["error"] and body["error"]["type"] == "ModelUnavailable"
    assert set(body["error"]["failures"][0]) == {"action", "reason", "path"}
    typed = agentloop.DegradedResult.from_wire(raw)
    assert typed is not None and typed.output == ["a", "the model is unavailable"]

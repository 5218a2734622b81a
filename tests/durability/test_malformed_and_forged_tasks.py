"""Issue 21, on a real worker: a malformed launch is refused with a typed error and recorded as its
run's failure; forged or malformed internal tasks run nothing and never change a run; no refused
value nor a step error's quoted input reaches the worker's log, the run store or Redis's results."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from durability_support import DurabilityRig, new_id

from agentloop.orchestration.wire import MERGE, PIPELINE_DONE, PROGRESS, RUN, STAGE


def _refusal(result: Any) -> str:
    with pytest.raises(Exception) as raised:
        result.get(timeout=30)
    return f"{type(raised.value).__name__}: {raised.value}"


def _succeeded(durability_rig: DurabilityRig, runnable: str, goal: int = 2) -> str:
    run_id = new_id()
    durability_rig.launch(runnable, goal, task_id=run_id, context={"step_seconds": 0}).get(timeout=60)
    assert durability_rig.ended(run_id).status == "succeeded"
    return run_id


# ----- item 5: a malformed launch ------------------------------------------------------------------

MALFORMED = {
    "an unknown argument": ({"runnable": "durability.count", "input": 1, "colour": "red"}, "'colour'"),
    "no runnable": ({"input": 1}, "runnable must be a non-empty string, got NoneType"),
    "a budget of the wrong type": ({"runnable": "durability.count", "token_budget": "lots"}, "token_budget"),
}


@pytest.mark.parametrize(("kwargs", "says"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_launch_is_refused_with_a_typed_error_and_its_run_fails_with_the_reason(
    durability_rig: DurabilityRig, kwargs: dict[str, Any], says: str
) -> None:
    run_id = new_id()
    refusal = _refusal(durability_rig.app.send_task("agentloop.launch", kwargs=kwargs, task_id=run_id))

    assert refusal.startswith("LaunchRequestError: ") and says in refusal
    record = durability_rig.ended(run_id)
    assert record.status == "failed" and record.error["type"] == "LaunchRequestError"
    assert says in record.error["message"]
    page = durability_rig.app.send_task(PROGRESS, kwargs={"run_id": run_id}).get(timeout=30)
    assert page["status"] == "failed" and says in page["error"]["message"]


def test_a_launch_whose_run_id_no_store_holds_is_refused_and_records_nothing(
    durability_rig: DurabilityRig,
) -> None:
    task_id = new_id()
    kwargs = {"runnable": "durability.count", "input": 1, "run_id": ["not", "an", "id"]}

    refusal = _refusal(durability_rig.app.send_task("agentloop.launch", kwargs=kwargs, task_id=task_id))

    assert refusal == "LaunchRequestError: run_id must be a non-empty string, got list"
    assert durability_rig.store.get_run(task_id) is None  # no id to record it under: the result says why


# ----- item 6: forged and malformed internal tasks -------------------------------------------------


def _forgeries(run_id: str, runnable: str) -> list[tuple[str, tuple[Any, ...]]]:
    node = {"run_id": run_id, "runnable": runnable, "path": ""}
    return [
        (RUN, (node, 3)),
        (STAGE, (None, node, 0, 3)),
        (PIPELINE_DONE, ({"counted": 1}, node)),
        (MERGE, ([{"counted": 1}, {"counted": 2}], node, 3)),
    ]


@pytest.mark.parametrize("runnable", ["durability.two_counts", "durability.pair", "durability.count"])
def test_forged_internal_tasks_are_refused_and_a_finished_run_never_changes(
    durability_rig: DurabilityRig, runnable: str
) -> None:
    run_id = _succeeded(durability_rig, runnable)
    before, events = durability_rig.store.get_run(run_id), durability_rig.store.events(run_id)

    for name, args in _forgeries(run_id, runnable):
        refusal = _refusal(durability_rig.app.send_task(name, args=args))
        assert (
            refusal.startswith("RunOwnershipError: ")
            and f"run '{run_id}' belongs to another launch" in refusal
        )

    assert durability_rig.store.get_run(run_id) == before
    assert durability_rig.store.events(run_id) == events


def test_a_task_of_its_own_run_that_has_ended_appends_nothing(durability_rig: DurabilityRig) -> None:
    failed = new_id()
    with pytest.raises(Exception, match="failed after 1 steps"):
        durability_rig.launch("durability.fail_after", 1, task_id=failed, context={"step_seconds": 0}).get(
            timeout=30
        )
    succeeded = _succeeded(durability_rig, "durability.count")
    before = {run_id: durability_rig.store.events(run_id) for run_id in (failed, succeeded)}
    nodes = {}
    for run_id, runnable in ((failed, "durability.fail_after"), (succeeded, "durability.count")):
        owner = durability_rig.store.run_owner(run_id)
        assert owner is not None
        nodes[run_id] = {"run_id": run_id, "runnable": runnable, "path": "", "owner_token": owner.token}

    refusal = _refusal(durability_rig.app.send_task(RUN, args=(nodes[failed], 1)))
    durability_rig.app.send_task(RUN, args=(nodes[succeeded], 1))  # ignored: the run's result stands
    deadline = time.monotonic() + 30
    while f"run '{succeeded}' has already ended" not in durability_rig.worker.log_text():
        assert time.monotonic() < deadline, "the task of the succeeded run was not refused"
        time.sleep(0.05)

    assert f"run '{failed}' has already ended (failed); it is not rewritten" in refusal
    assert {run_id: durability_rig.store.events(run_id) for run_id in before} == before


@pytest.mark.parametrize(
    "node",
    ["not a node", {"runnable": "durability.count"}, {"run_id": "r", "runnable": "x", "ancestors": [5]}],
    ids=["a string", "no run id", "an ancestor that is not an object"],
)
def test_a_malformed_node_fails_its_task_with_a_typed_error(durability_rig: DurabilityRig, node: Any) -> None:
    for name, args in [(RUN, (node, 1)), (PIPELINE_DONE, (1, node)), (MERGE, ([1], node))]:
        assert _refusal(durability_rig.app.send_task(name, args=args)).startswith("InvalidNodeError: "), name


def test_a_node_of_the_wrong_kind_fails_with_a_typed_error_not_an_assertion(
    durability_rig: DurabilityRig,
) -> None:
    run_id = new_id()
    durability_rig.launch("durability.count", 100, task_id=run_id, context={"step_seconds": 0.05})
    deadline = time.monotonic() + 30
    while getattr(durability_rig.store.get_run(run_id), "status", None) != "running":
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.05)
    owner = durability_rig.store.run_owner(run_id)
    assert owner is not None
    node = {"run_id": run_id, "runnable": "durability.count", "path": "", "owner_token": owner.token}

    refusal = _refusal(durability_rig.app.send_task(MERGE, args=([1, 2], node, 3)))

    assert refusal == "InvalidNodeError: 'durability.count' at '' is not a BaseCompositeAgent"


# ----- item 8: secrets in records ------------------------------------------------------------------


@pytest.fixture
def redis_results(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _everywhere(durability_rig: DurabilityRig, results: redis.Redis, run_id: str) -> str:
    """The worker's log, the run's record (but its input, which it keeps by design) and events, and
    every Celery result in Redis, as text."""
    record = durability_rig.store.get_run(run_id)
    kept_record = {
        key: value for key, value in (record.to_dict() if record else {}).items() if key != "input"
    }
    stored = json.dumps([kept_record, durability_rig.store.events(run_id)], default=str)
    kept = [results.get(key) or b"" for key in results.scan_iter("celery-task-meta-*")]
    return "\n".join(
        [durability_rig.worker.log_text(), stored, *(value.decode("utf-8", "replace") for value in kept)]
    )


SECRET = "hunter2-{}"
REFUSED_VALUES = {
    "a budget": lambda secret: {"runnable": "durability.count", "token_budget": f"postgres://a:{secret}@db"},
    "an unregistered runnable": lambda secret: {"runnable": f"postgres://a:{secret}@db"},
    "a runnable that is no name": lambda secret: {"runnable": {"dsn": f"postgres://a:{secret}@db"}},
    "a deadline": lambda secret: {"runnable": "durability.count", "deadline_seconds": f"{secret}-x"},
}


@pytest.mark.parametrize("kwargs_of", REFUSED_VALUES.values(), ids=REFUSED_VALUES.keys())
def test_a_refused_value_reaches_no_log_line_record_or_result(
    durability_rig: DurabilityRig, redis_results: redis.Redis, kwargs_of: Any
) -> None:
    run_id, secret = new_id(), SECRET.format(new_id())

    refusal = _refusal(
        durability_rig.app.send_task("agentloop.launch", kwargs=kwargs_of(secret), task_id=run_id)
    )

    assert durability_rig.ended(run_id).status == "failed"
    assert secret not in refusal
    assert secret not in _everywhere(durability_rig, redis_results, run_id)


def test_a_step_error_quoting_its_input_is_stored_and_returned_scrubbed(
    durability_rig: DurabilityRig, redis_results: redis.Redis
) -> None:
    run_id, secret = new_id(), SECRET.format(new_id())

    refusal = _refusal(
        durability_rig.launch("durability.connect", f"postgres://agent:{secret}@db/x", task_id=run_id)
    )

    assert refusal == "ConnectionError: could not connect to '<hidden>'"
    record = durability_rig.ended(run_id)
    assert record.error == {"type": "ConnectionError", "message": "could not connect to '<hidden>'"}
    assert secret not in _everywhere(durability_rig, redis_results, run_id)

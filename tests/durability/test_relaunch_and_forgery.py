"""A run id is an idempotency key, on a real worker: a relaunch never re-runs, rewrites or flips a
run; a hand-sent ``agentloop.finalize`` or a forged node cannot end a run it does not own."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from durability_support import DurabilityRig, new_id

from agentloop.orchestration.store import RunRecord
from agentloop.orchestration.wire import FINALIZE, RUN


def _succeeded(durability_rig: DurabilityRig, runnable: str = "durability.count", goal: int = 2) -> RunRecord:
    run_id = new_id()
    assert durability_rig.launch(runnable, goal, task_id=run_id, context={"step_seconds": 0}).get(
        timeout=30
    ) == {"counted": goal}
    return durability_rig.ended(run_id)


def _until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _until_running(durability_rig: DurabilityRig, run_id: str) -> None:
    _until(lambda: getattr(durability_rig.store.get_run(run_id), "status", None) == "running")
    time.sleep(0.3)


def _refusal(result: object) -> str:
    with pytest.raises(Exception) as raised:
        result.get(timeout=30)  # type: ignore[attr-defined]
    return f"{type(raised.value).__name__}: {raised.value}"


BAD_RELAUNCHES = {
    "an unregistered runnable": {"runnable": "durability.nobody"},
    "a bad budget": {"token_budget": -5},
    "a budget past 2**63": {"token_budget": 2**63},
    "a bad context": {"context": ["not", "an", "object"]},
    "another workflow": {"runnable": "durability.other"},
    "another input": {"input": 7},
}


@pytest.mark.parametrize("change", BAD_RELAUNCHES.values(), ids=BAD_RELAUNCHES.keys())
def test_a_relaunch_under_a_new_task_id_is_refused_and_the_run_is_untouched(
    durability_rig: DurabilityRig, change: dict
) -> None:
    before = _succeeded(durability_rig)
    arguments = {"runnable": "durability.count", "input": 2, "context": {"step_seconds": 0}, **change}
    runnable, goal = arguments.pop("runnable"), arguments.pop("input")

    refusal = _refusal(durability_rig.launch(runnable, goal, run_id=before.id, **arguments))

    assert f"run id '{before.id}' is taken by a run of 'durability.count' (succeeded)" in refusal
    assert "arguments differ from that run's" in refusal
    assert durability_rig.store.get_run(before.id) == before
    assert durability_rig.app.AsyncResult(before.id).get(timeout=5) == {"counted": 2}


@pytest.mark.parametrize("change", BAD_RELAUNCHES.values(), ids=BAD_RELAUNCHES.keys())
def test_a_relaunch_under_the_runs_own_task_id_is_ignored_and_its_result_is_the_runs(
    durability_rig: DurabilityRig, change: dict
) -> None:
    before = _succeeded(durability_rig)
    events = durability_rig.store.events(before.id)
    arguments = {"runnable": "durability.count", "input": 2, "context": {"step_seconds": 0}, **change}
    runnable, goal = arguments.pop("runnable"), arguments.pop("input")

    ignored = durability_rig.worker.log_text().count("this message is ignored")
    result = durability_rig.launch(runnable, goal, task_id=before.id, **arguments)
    _until(lambda: durability_rig.worker.log_text().count("this message is ignored") > ignored)

    assert result.get(timeout=5) == {"counted": 2}  # the run's own result, never replaced
    assert durability_rig.store.get_run(before.id) == before
    assert durability_rig.store.events(before.id) == events


def test_the_same_launch_again_attaches_to_the_ended_run_without_running_it(
    durability_rig: DurabilityRig,
) -> None:
    before = _succeeded(durability_rig, goal=3)
    events = durability_rig.store.events(before.id)

    again = durability_rig.launch("durability.count", 3, run_id=before.id, context={"step_seconds": 0})

    assert again.get(timeout=30) == {"counted": 3}
    assert durability_rig.store.get_run(before.id) == before
    assert durability_rig.store.events(before.id) == events  # not one iteration ran again


def test_the_same_launch_while_the_run_goes_on_is_refused(durability_rig: DurabilityRig) -> None:
    run_id = new_id()
    first = durability_rig.launch("durability.count", 20, task_id=run_id, context={"step_seconds": 0.1})
    _until_running(durability_rig, run_id)
    twin = durability_rig.launch("durability.count", 20, run_id=run_id, context={"step_seconds": 0.1})

    assert "it is still running" in _refusal(twin)
    assert first.get(timeout=30) == {"counted": 20}
    assert durability_rig.ended(run_id).output == {"counted": 20}


def test_a_hand_sent_finalize_cannot_set_an_ended_runs_output(durability_rig: DurabilityRig) -> None:
    before = _succeeded(durability_rig)
    for args in [({"stolen": True}, before.id), ({"stolen": True}, before.id, "guessed-token")]:
        refusal = _refusal(durability_rig.app.send_task(FINALIZE, args=args))
        assert f"run '{before.id}' belongs to another launch" in refusal
    assert durability_rig.store.get_run(before.id) == before


def test_a_hand_sent_finalize_cannot_end_a_running_run_and_the_run_ends_its_own_way(
    durability_rig: DurabilityRig,
) -> None:
    run_id = new_id()
    result = durability_rig.launch("durability.two_counts", 20, task_id=run_id, context={"step_seconds": 0.1})
    _until_running(durability_rig, run_id)

    forged = durability_rig.app.send_task(FINALIZE, args=({"stolen": True}, run_id))
    assert "belongs to another launch" in _refusal(forged)
    assert durability_rig.store.get_run(run_id).status == "running"  # type: ignore[union-attr]

    assert result.get(timeout=60) == {"counted": 21}
    record = durability_rig.ended(run_id)
    assert (record.status, record.output) == ("succeeded", {"counted": 21})


def test_a_forged_node_cannot_flip_a_run_to_failed(durability_rig: DurabilityRig) -> None:
    run_id = new_id()
    result = durability_rig.launch("durability.count", 15, task_id=run_id, context={"step_seconds": 0.1})
    _until_running(durability_rig, run_id)
    forged = {"run_id": run_id, "runnable": "durability.nobody", "path": ""}

    with pytest.raises(Exception, match="belongs to another launch"):
        durability_rig.app.send_task(RUN, args=(forged, None)).get(timeout=30)

    assert result.get(timeout=30) == {"counted": 15}
    assert durability_rig.ended(run_id).status == "succeeded"
    assert "does not own it" in durability_rig.worker.log_text()


def test_a_relaunch_of_a_failed_run_does_not_run_it_again(durability_rig: DurabilityRig) -> None:
    run_id = new_id()
    with pytest.raises(Exception, match="failed after 1 steps"):
        durability_rig.launch("durability.fail_after", 1, task_id=run_id, context={"step_seconds": 0}).get(
            timeout=30
        )
    before = durability_rig.ended(run_id)

    again = durability_rig.launch("durability.fail_after", 1, run_id=run_id, context={"step_seconds": 0})

    assert "has already ended (failed" in _refusal(again)
    assert durability_rig.store.get_run(run_id) == before


def test_a_second_copy_of_a_launch_while_its_run_goes_on_runs_nothing_finished_again(
    durability_rig: DurabilityRig,
) -> None:
    # the same message twice (a producer's retry, a redelivery): its first stage has finished and
    # its second is counting when the copy arrives
    run_id = new_id()
    context = {"step_seconds": 0.3}
    first = durability_rig.launch("durability.two_counts", 3, task_id=run_id, context=context)

    def second_stage_counting() -> bool:
        return any(
            event["path"] == "pipeline/1" and event["phase"] == "iteration"
            for _, event in durability_rig.store.events(run_id)
        )

    _until(second_stage_counting)
    copy = durability_rig.launch("durability.two_counts", 3, task_id=run_id, context=context)

    assert first.get(timeout=60) == copy.get(timeout=60) == {"counted": 4}
    record = durability_rig.ended(run_id)
    assert (record.status, record.output) == ("succeeded", {"counted": 4})
    events = [event for _, event in durability_rig.store.events(run_id)]
    first_stage = [(e["phase"], e["iteration"]) for e in events if e["path"] == "pipeline/0"]
    assert first_stage == [("start", 0), ("iteration", 1), ("iteration", 2), ("iteration", 3), ("done", 3)]
    assert [e["phase"] for e in events if e["path"] == "" and e["status"] == "completed"] == ["done"]

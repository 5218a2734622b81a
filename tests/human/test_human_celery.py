"""Human in the loop on a real prefork worker: a branch of a chord pauses, the other branches go
on, the merge waits; answers are checked, settled once, and a wait can expire."""

from __future__ import annotations

import pytest
from human_support import answer, phases_at, start, wait_for_status, wait_until, waits

from agentloop.orchestration.errors import WorkflowFailedError

APPROVED = {"input": "b", "steps": ["step0", "approved=True", "step2"]}


def test_a_branch_pauses_its_chord_until_answered(human_worker) -> None:
    rig = human_worker
    handle = start(rig.app, rig.store, "human.fan")
    wait_for_status(rig.store, handle.run_id, "waiting")
    # the other branches finish; the merge does not run: the chord waits for branch b
    for key in ("a", "c"):
        wait_until(lambda key=key: rig.store.loop_record(handle.run_id, f"branch/{key}").finished)
    assert rig.store.get_run(handle.run_id).status == "waiting"
    assert not rig.store.loop_record(handle.run_id, "branch/b").finished
    assert not handle.result.ready()
    [wait] = waits(rig.store, handle.run_id)
    assert (wait.path, wait.status, wait.question.prompt) == ("branch/b", "pending", "ship it?")
    assert ("waiting", {"question": wait.describe()}) in phases_at(rig.store, handle.run_id, "branch/b")

    assert answer(rig.app, handle.run_id, True)["accepted"] is True
    assert handle.wait_sync(timeout=30) == {"a": "quick:a", "b": APPROVED, "c": "quick:c"}
    assert rig.store.get_run(handle.run_id).status == "succeeded"
    # the paused iteration ran again from the checkpoint of iteration 1, asking nothing twice
    resumed = [data for phase, data in phases_at(rig.store, handle.run_id, "branch/b") if phase == "resume"]
    assert resumed == [{"resumed_from": 1}]
    assert [w.status for w in waits(rig.store, handle.run_id)] == ["answered"]


def test_a_run_with_two_questions_waiting_stays_waiting_until_both_are_answered(human_worker) -> None:
    rig = human_worker
    handle = start(rig.app, rig.store, "human.fan_of_two_questions")
    wait_for_status(rig.store, handle.run_id, "waiting")
    wait_until(lambda: len(waits(rig.store, handle.run_id)) == 2)
    assert sorted((w.path, w.status) for w in waits(rig.store, handle.run_id)) == [
        ("branch/b", "pending"),
        ("branch/c", "pending"),
    ]

    assert answer(rig.app, handle.run_id, True, path="branch/b")["accepted"] is True
    wait_until(lambda: rig.store.loop_record(handle.run_id, "branch/b").finished)
    # b went on and finished; c still waits for its answer, and so does the run
    assert rig.store.get_run(handle.run_id).status == "waiting"
    assert not handle.result.ready()
    statuses = {w.path: w.status for w in waits(rig.store, handle.run_id)}
    assert statuses == {"branch/b": "answered", "branch/c": "pending"}

    assert answer(rig.app, handle.run_id, False, path="branch/c")["accepted"] is True
    assert handle.wait_sync(timeout=30) == {
        "a": "quick:a",
        "b": APPROVED,
        "c": {"input": "c", "steps": ["step0", "approved=False", "step2"]},
    }
    assert rig.store.get_run(handle.run_id).status == "succeeded"


def test_a_pipeline_stage_pauses_and_resumes(human_worker) -> None:
    rig = human_worker
    handle = start(rig.app, rig.store, "human.pipeline", "x")
    wait_for_status(rig.store, handle.run_id, "waiting")
    assert answer(rig.app, handle.run_id, False, path="pipeline/1")["accepted"] is True
    result = handle.wait_sync(timeout=30)
    assert result == {"input": "quick:x", "steps": ["step0", "approved=False", "step2"]}


def test_a_wrong_answer_is_refused_and_a_second_resume_too(human_worker) -> None:
    rig = human_worker
    handle = start(rig.app, rig.store, "human.typed", 1)
    wait_for_status(rig.store, handle.run_id, "waiting")
    for wrong in ({"count": -1}, {"count": "3"}, "3", {"count": 3, "more": 1}):
        refused = answer(rig.app, handle.run_id, wrong)
        assert refused["accepted"] is False and refused["reason"]
    assert rig.store.get_run(handle.run_id).status == "waiting"
    assert [w.status for w in waits(rig.store, handle.run_id)] == ["pending"]

    assert answer(rig.app, handle.run_id, {"count": 3})["accepted"] is True
    second = answer(rig.app, handle.run_id, {"count": 4})
    assert second["accepted"] is False
    assert handle.wait_sync(timeout=30)["steps"] == ["step0", "approved={'count': 3}", "step2"]
    assert [w.answer for w in waits(rig.store, handle.run_id)] == [{"count": 3}]


def test_an_expired_question_takes_its_default(human_worker) -> None:
    rig = human_worker
    handle = start(rig.app, rig.store, "human.expiring", 1)
    assert handle.wait_sync(timeout=30)["steps"] == ["step0", "approved=nobody", "step2"]
    [wait] = waits(rig.store, handle.run_id)
    assert wait.status == "expired"
    assert answer(rig.app, handle.run_id, "yes")["accepted"] is False  # too late


def test_an_expired_question_without_default_fails_the_run(human_worker) -> None:
    rig = human_worker
    handle = start(rig.app, rig.store, "human.expiring_unanswerable", 1)
    with pytest.raises(WorkflowFailedError, match="in time"):
        handle.wait_sync(timeout=30)
    assert rig.store.get_run(handle.run_id).status == "failed"
    assert [w.status for w in waits(rig.store, handle.run_id)] == ["expired"]


def test_a_run_resumes_on_a_worker_started_after_it_paused(human_rig) -> None:
    rig = human_rig
    with rig.worker():
        handle = start(rig.app, rig.store, "human.fan")
        wait_for_status(rig.store, handle.run_id, "waiting")
    # no worker now; a new one answers and finishes the chord the first one started
    with rig.worker():
        assert answer(rig.app, handle.run_id, True)["accepted"] is True
        assert handle.wait_sync(timeout=30) == {"a": "quick:a", "b": APPROVED, "c": "quick:c"}

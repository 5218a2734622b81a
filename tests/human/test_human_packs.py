"""Issue 36, item 3: a question leaves the pack. On a real prefork worker with nothing set, four
branches are packed into one ``agentloop.pack``; two of them ask a person at once. The pack ends
with the other two (their results recorded), both questions wait at once, and each answered
branch resumes alone, in a task of its own, from its checkpoint; the run ends with every
branch's output in its place."""

from __future__ import annotations

from human_support import answer, phases_at, start, wait_for_status, wait_until, waits

from agentloop.orchestration.wire import BATCH

APPROVED = {"input": "b", "steps": ["step0", "approved=True", "step2"]}


def test_two_packed_branches_wait_at_once_and_each_resumes_alone(human_worker) -> None:
    rig = human_worker
    handle = start(rig.app, rig.store, "human.packed_approvals")
    wait_for_status(rig.store, handle.run_id, "waiting")
    wait_until(lambda: len(waits(rig.store, handle.run_id)) == 2)
    assert sorted((w.path, w.status) for w in waits(rig.store, handle.run_id)) == [
        ("branch/b", "pending"),
        ("branch/c", "pending"),
    ]
    # the branches that asked nothing ended with the pack; the waiting ones did not
    for key in ("a", "d"):
        assert rig.store.loop_record(handle.run_id, f"branch/{key}").finished
    for key in ("b", "c"):
        assert not rig.store.loop_record(handle.run_id, f"branch/{key}").finished
    # each question was recorded by a task of its branch alone (its message an agentloop.lane)
    for wait in waits(rig.store, handle.run_id):
        assert wait.message is not None and wait.message["task"] == "agentloop.lane", wait.message
    assert not handle.result.ready()

    assert answer(rig.app, handle.run_id, False, path="branch/c")["accepted"] is True
    wait_until(lambda: rig.store.loop_record(handle.run_id, "branch/c").finished)
    assert rig.store.get_run(handle.run_id).status == "waiting"  # b still waits
    assert not handle.result.ready()

    assert answer(rig.app, handle.run_id, True, path="branch/b")["accepted"] is True
    assert handle.wait_sync(timeout=30) == {
        "a": "quick:a",
        "b": APPROVED,
        "c": {"input": "c", "steps": ["step0", "approved=False", "step2"]},
        "d": "quick:d",
    }
    assert rig.store.get_run(handle.run_id).status == "succeeded"
    # each resumed from the checkpoint of iteration 1, asking nothing twice
    for key in ("b", "c"):
        resumed = [
            data for phase, data in phases_at(rig.store, handle.run_id, f"branch/{key}") if phase == "resume"
        ]
        assert {"resumed_from": 1} in resumed, resumed
        assert [e for e, _ in phases_at(rig.store, handle.run_id, f"branch/{key}")].count("waiting") == 1


def test_batch_runs_that_ask_leave_their_pack_and_each_resumes_alone(human_worker) -> None:
    """Issue 36, items 2 and 3: a batch's runs go in one ``agentloop.batch_pack`` (their store
    steps made together per round); the two that ask a person leave it, the pack ends with the
    other two, and each answered run resumes alone from its checkpoint under its own launch."""
    rig = human_worker
    inputs = ["a", "ask-b", "ask-c", "d"]
    batch = rig.app.send_task(
        BATCH,
        kwargs={"runnable": "human.approve_if_told", "inputs": inputs, "poll_seconds": 0.2, "key": "asks"},
    ).get(timeout=30)
    ids = [f"{batch['batch_id']}-{index}" for index in range(len(inputs))]
    for run_id in (ids[1], ids[2]):
        wait_for_status(rig.store, run_id, "waiting")
    for run_id in (ids[0], ids[3]):
        wait_for_status(rig.store, run_id, "succeeded")
    for run_id in (ids[1], ids[2]):  # each question waits with its run's own launch as the message
        (wait,) = waits(rig.store, run_id)
        assert wait.message is not None and wait.message["task"] == "agentloop.launch", wait.message

    assert answer(rig.app, ids[2], False)["accepted"] is True
    wait_for_status(rig.store, ids[2], "succeeded")
    assert rig.store.get_run(ids[1]).status == "waiting"  # b still waits
    assert answer(rig.app, ids[1], True)["accepted"] is True
    wait_for_status(rig.store, ids[1], "succeeded")

    outputs = {run_id: rig.store.get_run(run_id).output for run_id in ids}
    assert outputs[ids[1]] == {"input": "ask-b", "steps": ["step0", "approved=True", "step2"]}
    assert outputs[ids[2]] == {"input": "ask-c", "steps": ["step0", "approved=False", "step2"]}
    assert outputs[ids[0]] == {"input": "a", "steps": ["step0", "step1", "step2"]}
    assert rig.app.AsyncResult(ids[1]).get(timeout=30) == outputs[ids[1]]
    for run_id in (ids[1], ids[2]):  # resumed from the checkpoint of iteration 1, asking once
        phases = phases_at(rig.store, run_id, "")
        assert {"resumed_from": 1} in [data for phase, data in phases if phase == "resume"], phases
        assert [phase for phase, _ in phases].count("waiting") == 1

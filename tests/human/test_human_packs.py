"""Issue 36, item 3: a question leaves the pack. On a real prefork worker with nothing set, four
branches are packed into one ``agentloop.pack``; two of them ask a person at once. The pack ends
with the other two (their results recorded), both questions wait at once, and each answered
branch resumes alone, in a task of its own, from its checkpoint; the run ends with every
branch's output in its place."""

from __future__ import annotations

from human_support import answer, phases_at, start, wait_for_status, wait_until, waits

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

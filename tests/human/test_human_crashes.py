"""A worker killed (SIGKILL, its whole process group) between two writes of a pause or a resume:
the worker started next finishes the run, the answer applied once (issue 21).

``crash_points`` (imported by the worker) kills it right after the write the test arms. The
workers run with short time limits, so the message of the killed one comes back within 6 s.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from human_support import phases_at, start, wait_for_status, wait_until, waits

from agentloop.orchestration.wire import RESUME


@contextmanager
def _killed_after(rig: Any, crash_file: Path, write: str, run_id: str, answer: object) -> Iterator[object]:
    """Answer ``run_id`` with the worker armed to die after ``write``; a new worker takes over.
    Gives the resume's result (the redelivered message's) while that worker still runs: the
    caller waits for the run's end before it is stopped. Stopping it as soon as the resume
    returned killed it now and then inside the resumed branch's chord bookkeeping, a second
    fault this test is not about (three CI runs of 2026-12-02, the note of that session)."""
    with rig.worker() as worker:
        crash_file.write_text(write)
        sent = rig.app.send_task(RESUME, kwargs={"run_id": run_id, "answer": answer})
        worker.wait(30)  # it killed itself after the write
    assert not crash_file.exists(), f"the worker never made its {write} write"
    with rig.worker():
        yield sent.get(timeout=60)


@pytest.mark.parametrize("write", ["settle", "mark_running"])
def test_an_answer_accepted_before_the_worker_died_sends_the_run_on(
    crash_rig: Any, crash_file: Path, write: str
) -> None:
    rig = crash_rig
    with rig.worker():
        handle = start(rig.app, rig.store, "human.fan")
        wait_for_status(rig.store, handle.run_id, "waiting")
    with _killed_after(rig, crash_file, write, handle.run_id, True) as reply:
        assert isinstance(reply, dict) and reply["accepted"] is True, reply
        result = handle.wait_sync(timeout=60)
    assert result["b"] == {"input": "b", "steps": ["step0", "approved=True", "step2"]}
    assert rig.store.get_run(handle.run_id).status == "succeeded"
    [wait] = waits(rig.store, handle.run_id)
    assert (wait.status, wait.answer, wait.resumed) == ("answered", True, True)
    resumed = [data for phase, data in phases_at(rig.store, handle.run_id, "branch/b") if phase == "resume"]
    assert resumed == [{"resumed_from": 1}]  # the paused step ran on once


def test_a_pause_killed_before_its_expiry_was_sent_still_expires(crash_rig: Any, crash_file: Path) -> None:
    rig = crash_rig
    with rig.worker() as worker:
        crash_file.write_text("record")
        handle = start(rig.app, rig.store, "human.expiring", 1)
        wait_until(lambda: bool(waits(rig.store, handle.run_id)))
        worker.wait(30)
    assert not crash_file.exists()
    with rig.worker():  # the paused task comes back, asks again, and schedules the expiry it never sent
        assert handle.wait_sync(timeout=60)["steps"] == ["step0", "approved=nobody", "step2"]
    assert [w.status for w in waits(rig.store, handle.run_id)] == ["expired"]

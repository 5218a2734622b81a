"""The wait stores, SQL and memory, keep the same promises: recorded once, settled once, the run
marked waiting only while it runs."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentloop.actions.human import Question
from agentloop.orchestration.store import InMemoryRunStore, RunStore, open_store
from agentloop.orchestration.store.waits import ANSWERED, PENDING, Wait, WaitStore, wait_store_for


@pytest.fixture(params=["sql", "memory"])
def run_and_waits(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[RunStore, WaitStore]]:
    if request.param == "memory":
        run_store: RunStore = InMemoryRunStore()
    else:
        run_store, _ = open_store(f"sqlite:///{tmp_path / 'runs.sqlite3'}")
    waits = wait_store_for(run_store)
    assert waits is not None
    yield run_store, waits


def test_a_wait_is_recorded_once_and_settled_once(run_and_waits: tuple[RunStore, WaitStore]) -> None:
    run_store, waits = run_and_waits
    run_store.create_run(run_id="r1", runnable="x", input=None)
    run_store.mark_running("r1")
    wait = Wait(run_id="r1", path="branch/b", question=Question(prompt="ok?"), message={"task": "t"})
    assert waits.record(wait) and not waits.record(wait)
    assert waits.mark_run_waiting("r1") and run_store.get_run("r1").status == "waiting"
    assert not waits.mark_run_waiting("r1")  # only a running run starts waiting
    assert [w.status for w in waits.waits("r1", status=PENDING)] == [PENDING]
    assert waits.settle("r1", "branch/b", wait.key, status=ANSWERED, answer="yes")
    assert not waits.settle("r1", "branch/b", wait.key, status=ANSWERED, answer="no")
    stored = waits.get("r1", "branch/b", wait.key)
    assert stored is not None and (stored.status, stored.answer, stored.message) == (
        ANSWERED,
        "yes",
        {"task": "t"},
    )
    assert waits.waits("r1", status=PENDING) == []
    assert run_store.mark_running("r1") and run_store.get_run("r1").status == "running"


def test_a_run_is_not_marked_waiting_once_its_question_was_answered(
    run_and_waits: tuple[RunStore, WaitStore],
) -> None:
    # the pausing task's last write comes after an answer that already sent the run on
    run_store, waits = run_and_waits
    run_store.create_run(run_id="r1", runnable="x", input=None)
    run_store.mark_running("r1")
    wait = Wait(run_id="r1", path="p", question=Question(prompt="ok?"), message={"task": "t"})
    assert waits.record(wait)
    assert waits.settle("r1", "p", wait.key, status=ANSWERED, answer="yes")
    assert not waits.mark_run_waiting("r1")
    assert run_store.get_run("r1").status == "running"


def test_a_settled_wait_is_unresumed_until_its_message_is_sent_again(
    run_and_waits: tuple[RunStore, WaitStore],
) -> None:
    run_store, waits = run_and_waits
    run_store.create_run(run_id="r1", runnable="x", input=None)
    wait = Wait(run_id="r1", path="p", question=Question(prompt="ok?"), message={"task": "t"})
    assert waits.record(wait)
    later = datetime.now(UTC) + timedelta(seconds=5)
    assert not waits.mark_resumed("r1", "p", wait.key)  # pending: nothing to resume
    assert waits.unresumed(settled_before=later) == []
    assert waits.settle("r1", "p", wait.key, status=ANSWERED, answer="yes")
    [left] = waits.unresumed(settled_before=later)
    assert (left.status, left.answer, left.resumed) == (ANSWERED, "yes", False)
    assert waits.unresumed(settled_before=datetime.now(UTC) - timedelta(seconds=60)) == []
    assert waits.mark_resumed("r1", "p", wait.key) and not waits.mark_resumed("r1", "p", wait.key)
    assert waits.unresumed(settled_before=later) == []
    stored = waits.get("r1", "p", wait.key)
    assert stored is not None and stored.resumed

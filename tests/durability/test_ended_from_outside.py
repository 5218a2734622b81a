"""A run ended from outside its root's code (a task killed at its hard time limit, a loop past
its delivery limit) ends with one terminal event of its root, like every run: the guarantee
matrix's ``one end`` invariant found such runs with a status and no event (issue 33)."""

from __future__ import annotations

from celery.exceptions import TimeLimitExceeded

from agentloop.orchestration.errors import DeliveryLimitError
from agentloop.orchestration.runtime.run_end import end_with_failure
from agentloop.orchestration.store import InMemoryRunStore, RunOwner


def _root_ends(store: InMemoryRunStore, run_id: str) -> list[tuple[str, str]]:
    return [
        (event["status"], event["message"])
        for _, event in store.events(run_id)
        if event["path"] == "" and event["status"] in {"completed", "failed"}
    ]


def test_a_run_ended_from_outside_its_code_has_one_failed_event_of_its_root() -> None:
    store, owner = InMemoryRunStore(), RunOwner.new("digest")
    store.create_run(run_id="killed", runnable="slow.loop", input=None, owner=owner)

    assert end_with_failure(store, "killed", TimeLimitExceeded("22 s"), owner_token=owner.token)
    # a second path ending it again (the task's retry, another worker) adds nothing
    assert end_with_failure(store, "killed", DeliveryLimitError("again"), owner_token=owner.token)

    record = store.get_run("killed")
    assert record is not None and record.status == "failed"
    assert [(status, message.split(":")[0]) for status, message in _root_ends(store, "killed")] == [
        ("failed", "TimeLimitExceeded")
    ]


def test_a_run_whose_root_reported_its_failure_gets_no_second_event() -> None:
    store, owner = InMemoryRunStore(), RunOwner.new("digest")
    store.create_run(run_id="failed", runnable="loop", input=None, owner=owner)
    store.append_events("failed", [_failed_event("failed", "ValueError: step 2")])

    assert end_with_failure(store, "failed", ValueError("step 2"), owner_token=owner.token)

    assert _root_ends(store, "failed") == [("failed", "ValueError: step 2")]


def test_a_forged_task_writes_no_event_and_ends_nothing() -> None:
    store, owner = InMemoryRunStore(), RunOwner.new("digest")
    store.create_run(run_id="owned", runnable="loop", input=None, owner=owner)

    assert not end_with_failure(store, "owned", DeliveryLimitError("forged"), owner_token="guessed")

    record = store.get_run("owned")
    assert record is not None and not record.is_finished
    assert _root_ends(store, "owned") == []


def _failed_event(run_id: str, message: str) -> dict[str, object]:
    return {
        "run_id": run_id,
        "path": "",
        "runnable": "loop",
        "iteration": 2,
        "max_iterations": 10,
        "phase": "step",
        "status": "failed",
        "message": message,
        "data": {},
        "at": 0.0,
    }

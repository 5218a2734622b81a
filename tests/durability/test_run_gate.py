"""The run gate's reads: a run's owner once per process, whether it has ended once per interval, so
the many tasks of one run (a composite's branches) pay no extra round trip each; the first task of
a run in a process reads both at once (a pipeline's close, in the other pool process)."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop.orchestration.errors import RunAlreadyEndedError, RunOwnershipError
from agentloop.orchestration.runtime.run_gate import RunGate
from agentloop.orchestration.store import InMemoryRunStore, RunOwner
from agentloop.orchestration.wire import WorkflowNode


class CountingStore(InMemoryRunStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[str, int] = {"run_owner": 0, "run_owner_and_status": 0, "get_run": 0}

    def run_owner(self, run_id: str) -> RunOwner | None:
        self.reads["run_owner"] += 1
        return super().run_owner(run_id)

    def run_owner_and_status(self, run_id: str) -> tuple[RunOwner | None, str]:
        self.reads["run_owner_and_status"] += 1
        return super().run_owner_and_status(run_id)

    def get_run(self, run_id: str) -> Any:
        self.reads["get_run"] += 1
        return super().get_run(run_id)


def test_a_hundred_tasks_of_one_run_read_its_owner_and_its_status_once() -> None:
    store, owner = CountingStore(), RunOwner.new("digest")
    store.create_run(run_id="r-1", runnable="x", input=None, owner=owner)
    gate = RunGate(store, interval=3600.0)  # one answer per interval, whatever the machine's speed
    node = WorkflowNode(run_id="r-1", runnable="x", owner_token=owner.token).to_dict()

    admitted = [gate.admit({**node, "path": f"branch/{n}"}) for n in range(100)]

    assert len(admitted) == 100 and store.reads == {"run_owner": 0, "run_owner_and_status": 1, "get_run": 0}
    for guess in range(100):  # forged tokens: the owner is read again once per interval, no more
        with pytest.raises(RunOwnershipError):
            gate.admit({**node, "owner_token": f"guessed-{guess}"})
    assert store.reads == {"run_owner": 1, "run_owner_and_status": 1, "get_run": 0}


def test_the_first_task_of_a_run_in_a_process_reads_its_owner_and_status_in_one_read() -> None:
    store, owner = CountingStore(), RunOwner.new("digest")
    store.create_run(run_id="r-3", runnable="x", input=None, owner=owner)
    node = WorkflowNode(run_id="r-3", runnable="x", owner_token=owner.token).to_dict()

    RunGate(store, interval=0.0).admit(node)  # the owner unknown here: one read (it was two)
    assert store.reads == {"run_owner": 0, "run_owner_and_status": 1, "get_run": 0}
    RunGate(store, interval=0.0).admit(node)  # the owner known, the status stale: one read, no record
    assert store.reads == {"run_owner": 0, "run_owner_and_status": 2, "get_run": 0}
    with pytest.raises(RunOwnershipError):  # a forged token is refused before the status counts
        RunGate(store, interval=3600.0).admit({**node, "run_id": "r-3", "owner_token": "forged"})


def test_an_ended_run_admits_no_task_once_its_interval_has_passed() -> None:
    store, owner = CountingStore(), RunOwner.new("digest")
    store.create_run(run_id="r-2", runnable="x", input=None, owner=owner)
    node = WorkflowNode(run_id="r-2", runnable="x", owner_token=owner.token).to_dict()
    RunGate(store, interval=0.0).admit(node)
    store.finish_run("r-2", status="failed", error={"type": "E", "message": "m"}, owner_token=owner.token)

    with pytest.raises(RunAlreadyEndedError):
        RunGate(store, interval=0.0).admit(node)

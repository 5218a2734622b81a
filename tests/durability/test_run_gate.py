"""The run gate's reads: a run's owner once per process, whether it has ended once per interval, so
the many tasks of one run (a composite's branches) pay no extra round trip each."""

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
        self.reads: dict[str, int] = {"run_owner": 0, "get_run": 0}

    def run_owner(self, run_id: str) -> RunOwner | None:
        self.reads["run_owner"] += 1
        return super().run_owner(run_id)

    def get_run(self, run_id: str) -> Any:
        self.reads["get_run"] += 1
        return super().get_run(run_id)


def test_a_hundred_tasks_of_one_run_read_its_owner_and_its_status_once() -> None:
    store, owner = CountingStore(), RunOwner.new("digest")
    store.create_run(run_id="r-1", runnable="x", input=None, owner=owner)
    gate = RunGate(store, interval=3600.0)  # one answer per interval, whatever the machine's speed
    node = WorkflowNode(run_id="r-1", runnable="x", owner_token=owner.token).to_dict()

    admitted = [gate.admit({**node, "path": f"branch/{n}"}) for n in range(100)]

    assert len(admitted) == 100 and store.reads == {"run_owner": 1, "get_run": 1}
    for guess in range(100):  # forged tokens: the owner is read again once per interval, no more
        with pytest.raises(RunOwnershipError):
            gate.admit({**node, "owner_token": f"guessed-{guess}"})
    assert store.reads == {"run_owner": 2, "get_run": 1}


def test_an_ended_run_admits_no_task_once_its_interval_has_passed() -> None:
    store, owner = CountingStore(), RunOwner.new("digest")
    store.create_run(run_id="r-2", runnable="x", input=None, owner=owner)
    node = WorkflowNode(run_id="r-2", runnable="x", owner_token=owner.token).to_dict()
    RunGate(store, interval=0.0).admit(node)
    store.finish_run("r-2", status="failed", error={"type": "E", "message": "m"}, owner_token=owner.token)

    with pytest.raises(RunAlreadyEndedError):
        RunGate(store, interval=0.0).admit(node)

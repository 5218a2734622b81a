"""A second copy of a launch message (a redelivery, or the same launch sent again) whose run
already exists claims that run as the store holds it, on every store: the first copy's record
(its status, its output, its owner's token), never the values the second copy would have
written; a run the first copy ended gives the second its result."""

from __future__ import annotations

import pytest

from agentloop import BaseAgentLoop
from agentloop.orchestration.errors import RunAlreadyEndedError, RunIdTakenError
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.runtime.launches import attached_result, claim_launch
from agentloop.orchestration.store import RunStore


class Echo(BaseAgentLoop):
    def create_initial_state(self, *, input: object) -> object:
        return input

    def advance_state(self, *, state: object, iteration: int) -> object:
        return state

    def is_complete(self, *, state: object, iteration: int) -> bool:
        return True

    def build_result(self, *, state: object) -> object:
        return state


REGISTRY = RunnableRegistry()
REGISTRY.register("echo", Echo)
LAUNCH = {"runnable": "echo", "input": {"n": 1}, "run_id": "launched-once"}


def test_a_second_copy_reads_the_run_the_first_left(run_store: RunStore) -> None:
    first = claim_launch(run_store, LAUNCH, task_id="task-1", registered=REGISTRY)
    assert first.created and first.record.status == "pending"
    run_store.mark_running(first.run_id)

    again = claim_launch(run_store, LAUNCH, task_id="task-1", registered=REGISTRY)  # redelivered

    assert not again.created and again.record.status == "running"  # what the first left
    assert again.owner_token == first.owner_token  # the first copy's owner, not a new one
    run_store.finish_run(first.run_id, status="succeeded", output={"n": 2}, owner_token=first.owner_token)

    late = claim_launch(run_store, LAUNCH, task_id="task-2", registered=REGISTRY)  # sent again

    assert not late.created and late.record.status == "succeeded"
    assert attached_result(late.record) == {"n": 2}
    with pytest.raises(RunIdTakenError):  # another launch under the same id is refused
        claim_launch(run_store, {**LAUNCH, "input": {"n": 9}}, task_id="task-3", registered=REGISTRY)


def test_a_second_copy_of_a_launch_whose_run_failed_reads_the_failure(run_store: RunStore) -> None:
    first = claim_launch(run_store, LAUNCH, task_id="task-1", registered=REGISTRY)
    run_store.finish_run(
        first.run_id, status="failed", error={"type": "ValueError"}, owner_token=first.owner_token
    )

    late = claim_launch(run_store, LAUNCH, task_id="task-2", registered=REGISTRY)

    assert late.record.status == "failed" and late.record.error == {"type": "ValueError"}
    with pytest.raises(RunAlreadyEndedError):
        attached_result(late.record)

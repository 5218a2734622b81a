"""A launch that creates its run takes the run's cancel flag from the record its claim returns
(``runtime/launches.py``): the check before the run's first step reads no more (it was one round
trip of every launch). A launch of a run that existed reads the flag as before: a cancel may be
older than this delivery."""

from __future__ import annotations

import asyncio

import pytest

from agentloop.actions.errors import RunCancelledError
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.runtime.engine import WorkflowEngine
from agentloop.orchestration.runtime.launches import claim_launch
from agentloop.orchestration.runtime.next_step import Done
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.wire import WorkflowNode

REGISTRY = RunnableRegistry.from_modules(["workflows.durable"])


class FlagCountingStore(InMemoryRunStore):
    def __init__(self) -> None:
        super().__init__()
        self.flag_reads = 0

    def is_cancel_requested(self, run_id: str) -> bool:
        self.flag_reads += 1
        return super().is_cancel_requested(run_id)


def _launch(store: FlagCountingStore, run_id: str) -> object:
    """What ``agentloop.launch`` does with a loop's message: claim its id, then start it."""
    kwargs = {"runnable": "durable.metered", "input": 2, "run_id": run_id}
    claim = claim_launch(store, kwargs, task_id=f"task-{run_id}", registered=REGISTRY)
    node = WorkflowNode(run_id=claim.run_id, runnable="durable.metered", owner_token=claim.owner_token)
    engine = WorkflowEngine(registry=REGISTRY, store=store)
    return asyncio.run(engine.start(node, 2))


def test_a_launch_that_creates_its_run_reads_no_cancel_flag_before_its_first_step() -> None:
    store = FlagCountingStore()

    assert _launch(store, "new") == Done(value={"counted": 2})
    assert store.flag_reads == 0


def test_a_launch_of_a_run_that_existed_reads_its_cancel_flag_and_stops_on_it() -> None:
    store = FlagCountingStore()
    store.create_run(run_id="old", runnable="durable.metered", input=2, celery_task_id="task-old")
    store.request_cancel("old")

    with pytest.raises(RunCancelledError):
        _launch(store, "old")
    assert store.flag_reads == 1

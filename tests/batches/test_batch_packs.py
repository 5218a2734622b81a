"""Issue 36, item 2: batches are packed. With nothing set, a batch of a loop whose step is a
coroutine launches each chunk's runs together in one ``agentloop.batch_pack`` (no
``agentloop.launch`` at all), and each is still a run of its own: its own record, status,
events and result (in the run store and, under its id, in the result backend); a run that
fails fails alone. A batch of a plain-function loop is packed the same way (its steps run in
the pack's threads)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from celery import signals

from agentloop import BaseAgentLoop
from agentloop.orchestration.celery_adapter.batches import summarize
from agentloop.orchestration.wire import BATCH, BATCH_PACK, LAUNCH


class AwaitingCount(BaseAgentLoop):
    """Counts from the input up to ``input + 3``, a coroutine step at a time."""

    def create_initial_state(self, *, input: Any) -> Any:
        return {"start": input, "n": input}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= state["start"] + 3)

    def build_result(self, *, state: Any) -> Any:
        return state["n"]


@pytest.fixture
def sent() -> Iterator[Counter[str]]:
    """The task names this process publishes (the embedded worker's too) while the test runs."""
    names: Counter[str] = Counter()

    def count(sender: Any = None, headers: Any = None, **_: Any) -> None:
        names[str((headers or {}).get("task", sender))] += 1

    signals.before_task_publish.connect(count, weak=False)
    try:
        yield names
    finally:
        signals.before_task_publish.disconnect(count)


def run_batch(rig: Any, runnable: str, key: str) -> Any:
    rig.registry.register_input_provider(f"{key}-numbers", lambda n: [*range(n), None])
    answer = rig.app.send_task(
        BATCH,
        kwargs={
            "runnable": runnable,
            "provider": f"{key}-numbers",
            "provider_args": {"n": 24},
            "chunk_size": 7,
            "poll_seconds": 0.2,
            "key": key,
        },
    ).get(timeout=30)
    deadline = time.monotonic() + 60  # a ceiling: the verdicts below are counts
    while time.monotonic() < deadline:
        record = rig.store.get_run(answer["batch_id"])
        if record is not None and record.status != "running":
            return record
        time.sleep(0.2)
    raise AssertionError(f"the batch never ended: {summarize(rig.store, answer['batch_id'])}")


def test_a_batch_of_awaiting_loops_runs_in_packs_each_run_its_own(
    memory_celery: Any, sent: Counter[str]
) -> None:
    rig = memory_celery
    if "packs.awaiting_count" not in rig.registry:
        rig.registry.register("packs.awaiting_count", AwaitingCount)
    record = run_batch(rig, "packs.awaiting_count", "packed-batch")

    assert record.status == "succeeded", record.output
    summary = record.output
    assert (summary["total"], summary["succeeded"], summary["failed"], summary["open"]) == (25, 24, 1, 0)
    assert sent[BATCH_PACK] == 4 and sent[LAUNCH] == 0, sent  # 25 inputs in chunks of 7: four packs
    children = rig.store.list_runs(limit=100, parent_run_id=record.id)
    assert len({child.id for child in children}) == 25
    for child in children:
        index = int(child.id.rsplit("-", 1)[1])
        events = [event for _, event in rig.store.events(child.id)]
        assert events and {event["run_id"] for event in events} == {child.id}
        if index == 24:  # the bad input (None): this run alone failed, with its own failed event
            assert child.status == "failed" and events[-1]["status"] == "failed"
            assert rig.app.AsyncResult(child.id).state == "FAILURE"
            continue
        assert (child.status, child.output) == ("succeeded", index + 3)
        assert rig.app.AsyncResult(child.id).get(timeout=10) == index + 3


def test_a_batch_of_plain_function_loops_is_packed_too(memory_celery: Any, sent: Counter[str]) -> None:
    record = run_batch(memory_celery, "parity.count", "plain-batch")

    assert record.status == "succeeded" and record.output["succeeded"] == 24
    # its plain steps run in each pack's threads (packing/threads.py), not on the pack's loop
    assert sent[BATCH_PACK] == 4 and sent[LAUNCH] == 0, sent

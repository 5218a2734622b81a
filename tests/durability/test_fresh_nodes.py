"""Every start of a loop reads the run store, fresh or not (one statement that also counts the
delivery): a duplicate that is not flagged redelivered reads what its twin left and does not run
again; the ``fresh`` mark still travels (a pipeline's close reads it) and is unmarked on a later try.

The worker-side proof that a redelivered message reads its checkpoint is
``tests/integration/test_durable_loops.py::test_a_loop_whose_worker_died_resumes_on_another_worker``
(a SIGKILLed worker, kombu's ``redelivered`` flag on a real Redis)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from celery import Celery, chain, chord

from agentloop.orchestration.celery_adapter.deliveries import first_delivery, node_of, unmarked_signature
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.runtime.engine import WorkflowEngine
from agentloop.orchestration.runtime.next_step import Done
from agentloop.orchestration.store import InMemoryRunStore, LoopRecord, StartedLoop
from agentloop.orchestration.wire import LANE, MERGE, RUN, STAGE, WorkflowNode


class ReadCountingStore(InMemoryRunStore):
    """The in-memory store, counting the loop-record reads a task's start makes."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def loop_record(self, run_id: str, path: str) -> LoopRecord:
        self.reads.append(path)
        return super().loop_record(run_id, path)

    def start_loops(self, run_id: str, paths: Sequence[str]) -> list[StartedLoop]:
        self.reads.extend(paths)
        return super().start_loops(run_id, paths)


def _engine(store: InMemoryRunStore) -> WorkflowEngine:
    return WorkflowEngine(registry=RunnableRegistry.from_modules(["workflows.durable"]), store=store)


def _node(log: Path, *, fresh: bool) -> WorkflowNode:
    context = {"log": str(log), "step_seconds": 0}
    return WorkflowNode(
        run_id="r", runnable="durable.slow_count", path="branch/0", context=context, fresh=fresh
    )


def _iterations(log: Path) -> int:
    return log.read_text().count("\n") if log.exists() else 0


def test_a_fresh_node_and_a_stale_one_each_read_the_store_once(tmp_path: Path) -> None:
    store = ReadCountingStore()
    store.create_run(run_id="r", runnable="durable.slow_count", input=2)

    fresh = asyncio.run(_engine(store).start(_node(tmp_path / "a.log", fresh=True), 2))
    assert isinstance(fresh, Done) and fresh.value == {"counted": 2}
    assert store.reads == ["branch/0"]

    store.save_checkpoint("r", "other", 1, {"goal": 3, "n": 1})
    stale = WorkflowNode(
        run_id="r", runnable="durable.slow_count", path="other", context={"log": str(tmp_path / "b.log")}
    )
    resumed = asyncio.run(_engine(store).start(stale, 3))
    assert isinstance(resumed, Done) and resumed.value == {"counted": 3}
    assert store.reads == ["branch/0", "other"]
    assert _iterations(tmp_path / "b.log") == 2  # resumed after its checkpoint's iteration


def test_a_fresh_twin_of_a_finished_loop_returns_its_result_and_does_not_run_again(
    tmp_path: Path,
) -> None:
    store = ReadCountingStore()
    store.create_run(run_id="r", runnable="durable.slow_count", input=2)
    log = tmp_path / "iterations.log"

    first = asyncio.run(_engine(store).start(_node(log, fresh=True), 2))
    recorded = store.loop_record("r", "branch/0")
    twin = asyncio.run(_engine(store).start(_node(log, fresh=True), 4))  # same node, other input

    assert isinstance(first, Done) and isinstance(twin, Done)
    assert first.value == twin.value == {"counted": 2}
    assert recorded.finished and recorded.result == {"counted": 2}
    assert store.loop_record("r", "branch/0") == recorded  # its checkpoints did not replace the record's
    assert _iterations(log) == 2  # the twin read the first's result: no work repeated ...
    done = [event for _, event in store.events("r") if event["phase"] == "done"]
    assert len(done) == 1  # ... and no second end reported


# ----- which tries count as first deliveries, and what a later try unmarks -------------------------


@pytest.fixture
def probe_app() -> Iterator[Celery]:
    probe_app = Celery("fresh-nodes", set_as_current=False)

    @probe_app.task(name="probe", bind=True, shared=False)
    def probe(self: Any) -> None:  # pragma: no cover - never sent, its request is pushed by hand
        return None

    yield probe_app
    probe_app.close()


def _marked(run_id: str = "r", path: str = "") -> dict[str, Any]:
    return WorkflowNode(run_id=run_id, runnable="x", path=path, fresh=True).to_dict()


@pytest.mark.parametrize(
    ("request_fields", "first"),
    [
        ({"delivery_info": {"redelivered": False}}, True),
        ({"delivery_info": {}}, True),
        ({"delivery_info": {"redelivered": True}}, False),  # the broker's redelivery
        ({"delivery_info": {}, "retries": 1}, False),  # a Celery retry
        ({"delivery_info": {}, "called_directly": True}, False),
    ],
    ids=["first", "no flag", "redelivered", "retried", "called directly"],
)
def test_only_a_first_try_of_a_message_is_a_first_delivery(
    probe_app: Celery, request_fields: dict[str, Any], first: bool
) -> None:
    task = probe_app.tasks["probe"]
    task.push_request(**{"called_directly": False, "retries": 0, **request_fields})
    try:
        assert first_delivery(task) is first
        assert node_of(task, WorkflowNode.from_dict(_marked())).fresh is first
    finally:
        task.pop_request()


def test_a_later_try_unmarks_every_node_of_the_chain_celery_sends_after_it(probe_app: Celery) -> None:
    node, branch = _marked(), _marked(path="branch/1")
    tail = chain(
        probe_app.signature(STAGE, args=(node, 1, None)),
        chord(
            [probe_app.signature(RUN, args=(branch, 5), immutable=True)],
            probe_app.signature(MERGE, args=(node, [1])),
        ),
        probe_app.signature(LANE, args=(_marked(path="branch/2"), 3)),
    )
    links = [dict(signature) for signature in reversed(tail.tasks)]  # Celery pops the chain from its end
    task = probe_app.tasks["probe"]
    task.push_request(called_directly=False, retries=0, delivery_info={"redelivered": True}, chain=links)
    try:
        assert node_of(task, WorkflowNode.from_dict(_marked())).fresh is False
    finally:
        task.pop_request()

    def marks(value: Any) -> list[bool]:
        if isinstance(value, dict):
            own = [value["fresh"]] if "fresh" in value else []
            return own + [mark for item in value.values() for mark in marks(item)]
        if isinstance(value, list | tuple):
            return [mark for item in value for mark in marks(item)]
        return []

    assert len(marks(links)) == 4 and not any(marks(links))  # stage, branch, merge, lane


def test_a_first_delivery_leaves_the_chain_after_it_marked(probe_app: Celery) -> None:
    links = [dict(probe_app.signature(STAGE, args=(_marked(), 1, None)))]
    task = probe_app.tasks["probe"]
    task.push_request(called_directly=False, retries=0, delivery_info={}, chain=links)
    try:
        assert node_of(task, WorkflowNode.from_dict(_marked())).fresh is True
    finally:
        task.pop_request()
    assert links[0]["args"][0]["fresh"] is True


def test_a_paused_task_s_message_is_unmarked_so_that_resuming_reads_its_checkpoint(probe_app: Celery) -> None:
    message = dict(probe_app.signature(RUN, args=(_marked(path="branch/0"), {"question": 1})))
    unmarked_signature(message)
    assert message["args"][0]["fresh"] is False
    assert message["args"][1] == {"question": 1}  # user input is left as it is


def test_a_node_s_fresh_mark_round_trips_and_only_a_boolean_is_accepted() -> None:
    node = WorkflowNode(run_id="r", runnable="x", fresh=True)
    assert WorkflowNode.from_dict(node.to_dict()) == node
    assert "fresh" not in WorkflowNode(run_id="r", runnable="x").to_dict()  # the older wire shape
    assert WorkflowNode.from_dict({"run_id": "r", "runnable": "x"}).fresh is False
    with pytest.raises(ValueError, match="'fresh' must be true or false"):
        WorkflowNode.from_dict({"run_id": "r", "runnable": "x", "fresh": "yes"})


# ----- on a worker ---------------------------------------------------------------------------------


def test_the_branches_of_a_new_run_read_nothing_at_their_start_on_a_worker(
    memory_celery: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[tuple[str, str]] = []
    store = memory_celery.store
    read = store.loop_record
    monkeypatch.setattr(
        store, "loop_record", lambda run_id, path: reads.append((run_id, path)) or read(run_id, path)
    )

    handle = CeleryAgentRunner.create(runnable="parity.fan", app=memory_celery.app, store=store).request_sync(
        input=[1, 2, 3]
    )
    assert handle.wait_sync(timeout=30) == {"total": (1 + 3) + (2 + 3) + (3 + 3), "keys": ["0", "1", "2"]}
    mine = [path for run_id, path in reads if run_id == handle.run_id]
    assert mine == []
    assert store.loop_record(handle.run_id, "branch/1").finished

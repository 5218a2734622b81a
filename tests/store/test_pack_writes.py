"""``PackWrites``: the checkpoints and results a pack's loops hand in during one round of the event
loop go to the store in one call each, and each loop waits for its own write (or its error)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from agentloop import BaseAgentLoop
from agentloop.actions.usage import Usage, current_meter
from agentloop.orchestration.errors import StoreUnavailableError
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.runtime.engine import WorkflowEngine
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.store.pack_writes import PackWrites
from agentloop.orchestration.wire import WorkflowNode


def _in_a_thread(work: Any) -> Any:
    """An ``offload`` as a pack's threads are: the write's round trip off the event loop."""
    return asyncio.get_running_loop().run_in_executor(None, work)


#: Where PackWrites makes its round trips: on the event loop, or in a thread (a pack's).
OFFLOADS = [None, _in_a_thread]


class CountingStore(InMemoryRunStore):
    def __init__(self, *, failing: bool = False) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []
        self.failing = failing

    def save_checkpoints(
        self,
        run_id: str,
        checkpoints: Sequence[tuple[str, int, Any]],
        *,
        events: Sequence[Mapping[str, Any]] = (),
        **usage: int,
    ) -> None:
        self.calls.append(("save_checkpoints", len(checkpoints)))
        if self.failing:
            raise StoreUnavailableError("the database is away", seconds=0.0)
        super().save_checkpoints(run_id, checkpoints, events=events, **usage)

    def finish_loops(
        self,
        run_id: str,
        results: Sequence[tuple[str, Any]],
        *,
        events: Sequence[Mapping[str, Any]] = (),
        **usage: int,
    ) -> list[Any]:
        self.calls.append(("finish_loops", len(results)))
        return super().finish_loops(run_id, results, events=events, **usage)


@pytest.mark.parametrize("offload", OFFLOADS, ids=["on-the-loop", "in-a-thread"])
def test_the_writes_of_one_round_go_to_the_store_in_one_call_each(offload: Any) -> None:
    store = CountingStore()
    store.finish_loop("r", "b/1", "twin's")

    async def pack() -> list[Any]:
        writes = PackWrites(store, "r", offload=offload)
        await asyncio.gather(*(writes.checkpoint(f"b/{i}", 1, {"n": i}) for i in range(10)))
        return list(await asyncio.gather(*(writes.finish(f"b/{i}", i) for i in range(10))))

    assert asyncio.run(pack()) == [0, "twin's", *range(2, 10)]
    assert store.calls == [("save_checkpoints", 10), ("finish_loops", 10)]
    assert store.loop_record("r", "b/7") == (True, 7, (1, {"n": 7}))


@pytest.mark.parametrize("offload", OFFLOADS, ids=["on-the-loop", "in-a-thread"])
def test_a_failed_write_fails_every_loop_that_waited_on_it(offload: Any) -> None:
    store = CountingStore(failing=True)

    async def pack() -> list[Any]:
        writes = PackWrites(store, "r", offload=offload)
        return list(
            await asyncio.gather(
                *(writes.checkpoint(f"b/{i}", 1, {}) for i in range(3)), return_exceptions=True
            )
        )

    outcomes = asyncio.run(pack())
    assert len(outcomes) == 3 and all(isinstance(outcome, StoreUnavailableError) for outcome in outcomes)
    assert store.calls == [("save_checkpoints", 3)]


def test_a_loop_goes_on_only_once_its_checkpoint_is_recorded() -> None:
    store = CountingStore()

    async def loop() -> Any:
        writes = PackWrites(store, "r")
        waiting = writes.checkpoint("b/0", 4, {"n": 4})
        assert store.loop_record("r", "b/0").checkpoint is None  # not written before the round ends
        await waiting
        return store.loop_record("r", "b/0").checkpoint

    assert asyncio.run(loop()) == (4, {"n": 4})


@pytest.mark.parametrize("size", [1, 50])
def test_each_loop_gets_its_own_result_back(size: int) -> None:
    store = CountingStore()

    async def pack() -> list[Any]:
        writes = PackWrites(store, "r")
        return list(await asyncio.gather(*(writes.finish(f"b/{i}", {"i": i}) for i in range(size))))

    assert asyncio.run(pack()) == [{"i": i} for i in range(size)]


class Buffer:
    """A publisher's event buffer as PackWrites sees it."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.pending = events

    def take_events(self) -> list[dict[str, Any]]:
        taken, self.pending = self.pending, []
        return taken

    def give_back(self, events: list[dict[str, Any]]) -> None:
        self.pending = events + self.pending


def _event(path: str, iteration: int) -> dict[str, Any]:
    return {"path": path, "iteration": iteration, "phase": "iteration", "status": "progress", "data": {}}


@pytest.mark.parametrize("offload", OFFLOADS, ids=["on-the-loop", "in-a-thread"])
def test_a_checkpoint_is_written_with_the_events_emitted_before_it(offload: Any) -> None:
    """A worker killed after a pack's checkpoint has stored every event up to it (the pack's events
    were buffered for a second while its checkpoints were written at once: a resumed branch's
    first stored event was ``resume``, its ``start`` lost)."""
    store = CountingStore()
    buffer = Buffer([_event("b/0", 0), _event("b/0", 1)])

    async def pack() -> None:
        writes = PackWrites(store, "r", events=buffer, offload=offload)
        await writes.checkpoint("b/0", 1, {"n": 1})

    asyncio.run(pack())
    assert [(e["path"], e["iteration"]) for _, e in store.events("r")] == [("b/0", 0), ("b/0", 1)]
    assert store.loop_record("r", "b/0").checkpoint == (1, {"n": 1})
    assert buffer.pending == []


@pytest.mark.parametrize("offload", OFFLOADS, ids=["on-the-loop", "in-a-thread"])
def test_events_taken_for_a_checkpoint_that_failed_go_back_to_the_buffer(offload: Any) -> None:
    store = CountingStore(failing=True)
    buffer = Buffer([_event("b/0", 1)])

    async def pack() -> None:
        writes = PackWrites(store, "r", events=buffer, offload=offload)
        await writes.checkpoint("b/0", 1, {"n": 1})

    with pytest.raises(StoreUnavailableError):
        asyncio.run(pack())
    assert buffer.pending == [_event("b/0", 1)]


class UsageBuffer:
    """A pack's meter as PackWrites sees it."""

    def __init__(self, pending: Usage) -> None:
        self.pending = pending

    def take(self) -> Usage:
        taken, self.pending = self.pending, Usage()
        return taken

    def keep(self, usage: Usage) -> None:
        self.pending = usage + self.pending


@pytest.mark.parametrize("offload", OFFLOADS, ids=["on-the-loop", "in-a-thread"])
def test_a_checkpoint_is_written_with_the_usage_of_the_calls_before_it_and_a_failed_one_keeps_it(
    offload: Any,
) -> None:
    """A worker killed after a pack's checkpoint has counted every model call before it (the
    pack's usage was buffered for a second: the usage of the calls a resumed branch does not
    make again was lost)."""
    store = CountingStore()
    store.create_run(run_id="r", runnable="fan", input=None)
    usage = UsageBuffer(Usage(input_tokens=5, output_tokens=11))

    async def pack() -> None:
        writes = PackWrites(store, "r", usage=usage, offload=offload)
        await writes.checkpoint("b/0", 1, {"n": 1})

    asyncio.run(pack())
    record = store.get_run("r")
    assert record is not None and (record.input_tokens, record.output_tokens) == (5, 11)
    assert store.calls == [("save_checkpoints", 1)] and usage.pending == Usage()

    store.failing, usage.pending = True, Usage(input_tokens=7)
    with pytest.raises(StoreUnavailableError):
        asyncio.run(pack())
    assert usage.pending == Usage(input_tokens=7)


class _Counting(BaseAgentLoop):
    """Three iterations of one awaited wait each."""

    max_iterations = 4

    def create_initial_state(self, *, input: Any) -> dict[str, int]:
        return {"n": 0}

    async def advance_state(self, *, state: dict[str, int], iteration: int) -> dict[str, int]:
        await asyncio.sleep(0)
        return {"n": state["n"] + 1}

    def is_complete(self, *, state: dict[str, int], iteration: int) -> bool:
        return state["n"] >= 3

    def build_result(self, *, state: dict[str, int]) -> int:
        return state["n"]


class CheckpointWatch(InMemoryRunStore):
    """At each pack checkpoint: which events of its loops' iterations the store then holds."""

    def __init__(self) -> None:
        super().__init__()
        self.missing: list[tuple[str, int]] = []
        self.checkpoints = 0

    def save_checkpoints(
        self,
        run_id: str,
        checkpoints: Sequence[tuple[str, int, Any]],
        *,
        events: Sequence[Mapping[str, Any]] = (),
        **usage: int,
    ) -> None:
        super().save_checkpoints(run_id, checkpoints, events=events, **usage)
        stored = {(e["path"], e["iteration"]) for _, e in self.events(run_id)}
        self.checkpoints += len(checkpoints)
        self.missing += [(path, n) for path, iteration, _ in checkpoints for n in range(iteration + 1)
                         if (path, n) not in stored]  # fmt: skip


def test_a_pack_on_the_engine_stores_each_branchs_events_up_to_its_checkpoint_with_it() -> None:
    """Through ``WorkflowEngine.start_pack``: events are written at most every second, checkpoints
    after every iteration here; every checkpoint finds its loop's events up to it stored."""
    registry = RunnableRegistry()
    registry.register("counting", _Counting)
    store = CheckpointWatch()
    engine = WorkflowEngine(
        registry=registry, store=store, progress_interval=60, events_interval=60, checkpoint_interval=0
    )
    store.create_run(run_id="r", runnable="fan", input=3)
    root = WorkflowNode(run_id="r", runnable="fan", fresh=True)
    nodes = [WorkflowEngine.branch_node(root, "counting", str(k), 3, True) for k in range(3)]

    outcomes = asyncio.run(engine.start_pack(nodes, [None] * 3))

    assert [outcome.value for outcome in outcomes] == [3, 3, 3]  # type: ignore[union-attr]
    assert store.checkpoints == 6  # after iterations 1 and 2 of each branch (3 ends it)
    assert store.missing == []


class RecordReads(InMemoryRunStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def loop_record(self, run_id: str, path: str) -> Any:
        self.reads.append("loop_record")
        return super().loop_record(run_id, path)

    def loop_records(self, run_id: str, paths: Sequence[str]) -> Any:
        self.reads.append(f"loop_records({len(paths)})")
        return super().loop_records(run_id, paths)

    def start_loops(self, run_id: str, paths: Sequence[str]) -> Any:
        self.reads.append(f"start_loops({len(paths)})")
        return super().start_loops(run_id, paths)


def test_a_redelivered_pack_reads_its_branches_records_at_once_and_each_resumes_from_its_own() -> None:
    registry = RunnableRegistry()
    registry.register("counting", _Counting)
    store = RecordReads()
    engine = WorkflowEngine(
        registry=registry, store=store, progress_interval=60, events_interval=60, checkpoint_interval=0
    )
    store.create_run(run_id="r", runnable="fan", input=3)
    store.finish_loop("r", "branch/0", 99)  # ended before the worker died: its result stands
    store.save_checkpoint("r", "branch/1", 2, {"n": 2})  # one iteration left
    root = WorkflowNode(run_id="r", runnable="fan", fresh=False)  # a redelivered pack
    nodes = [WorkflowEngine.branch_node(root, "counting", str(k), 3, True) for k in range(3)]

    outcomes = asyncio.run(engine.start_pack(nodes, [None] * 3))

    assert [outcome.value for outcome in outcomes] == [99, 3, 3]  # type: ignore[union-attr]
    assert store.reads == ["start_loops(3)"]
    resumed = [e for _, e in store.events("r") if e["path"] == "branch/1" and e["phase"] == "resume"]
    assert [e["iteration"] for e in resumed] == [2]


class _SlowStore(InMemoryRunStore):
    """A store whose first results' write waits until a loop of the pack says it ran meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.writing, self.ran_meanwhile = threading.Event(), threading.Event()
        self.saw: list[bool] = []  # per results' write: whether a loop ran while it waited

    def finish_loops(self, run_id: str, results: Sequence[tuple[str, Any]], **kwargs: Any) -> list[Any]:
        self.writing.set()
        self.saw.append(self.ran_meanwhile.wait(10))
        return super().finish_loops(run_id, results, **kwargs)


class _Quick(_Counting):
    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {"n": 3}


class _WaitsForTheWrite(_Counting):
    """Goes on, one short wait at a time, until the store is writing its sibling's result, then
    says it ran meanwhile: only possible when the write is off the event loop."""

    max_iterations = 100_000

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        store = self.context
        if not store.writing.is_set():
            await asyncio.sleep(0.001)
            return state
        store.ran_meanwhile.set()
        return {"n": 3}


def test_a_packs_write_leaves_its_event_loop_to_the_other_loops() -> None:
    store = _SlowStore()
    registry = RunnableRegistry()
    registry.register("quick", _Quick, context_factory=lambda spec: store)
    registry.register("waits", _WaitsForTheWrite, context_factory=lambda spec: store)
    engine = WorkflowEngine(
        registry=registry, store=store, progress_interval=60, events_interval=60, checkpoint_interval=60
    )  # no checkpoint to write behind the slow result (a pack's writes go one at a time)
    store.create_run(run_id="r", runnable="fan", input=None)
    root = WorkflowNode(run_id="r", runnable="fan", fresh=True)
    nodes = [WorkflowEngine.branch_node(root, name, name, 2, True) for name in ("quick", "waits")]

    outcomes = asyncio.run(engine.start_pack(nodes, [None, None]))

    assert [outcome.value for outcome in outcomes] == [3, 3]  # type: ignore[union-attr]
    assert store.saw[0] is True  # the other loop ran while the first write waited in its thread


class _UsageCountingStore(InMemoryRunStore):
    def __init__(self) -> None:
        super().__init__()
        self.usage_writes = 0

    def add_usage(self, run_id: str, input_tokens: int, output_tokens: int) -> tuple[int, int]:
        self.usage_writes += 1
        return super().add_usage(run_id, input_tokens, output_tokens)


class _Metered(_Counting):
    """Three steps, each using one token in and one out (as a model call reports them)."""

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        await asyncio.sleep(0.02)
        meter = current_meter()
        assert meter is not None
        meter.record(Usage(input_tokens=1, output_tokens=1))
        return {"n": state["n"] + 1}


def test_a_packs_branches_write_their_usage_together_not_each_on_its_own() -> None:
    """One meter for the pack's branches (one run): the usage is written at most once per interval
    for all of them, not once per branch (each write a round trip on the pack's event loop)."""
    store = _UsageCountingStore()
    registry = RunnableRegistry()
    registry.register("metered", _Metered)
    engine = WorkflowEngine(registry=registry, store=store, progress_interval=60, events_interval=0.01)
    store.create_run(run_id="r", runnable="fan", input=None)
    root = WorkflowNode(run_id="r", runnable="fan", fresh=True)
    nodes = [WorkflowEngine.branch_node(root, "metered", str(k), 40, True) for k in range(40)]

    asyncio.run(engine.start_pack(nodes, [None] * 40))

    record = store.get_run("r")
    assert record is not None and (record.input_tokens, record.output_tokens) == (120, 120)
    # 40 branches x 3 steps: per-branch meters wrote each branch's usage at every step past the
    # interval (some 80 writes); the pack's meter writes once per round of the steps, or with a result
    assert store.usage_writes <= 20, store.usage_writes


class ThreadNoting(InMemoryRunStore):
    """Notes the thread each ``append_events`` ran on; fails the first ``failing`` of them."""

    def __init__(self, failing: int = 0) -> None:
        super().__init__()
        self.threads: list[int] = []
        self.failing = failing

    def append_events(self, root_run_id: str, events: Any) -> None:
        self.threads.append(threading.get_ident())
        if self.failing:
            self.failing -= 1
            raise StoreUnavailableError("the database is away", seconds=0.0)
        super().append_events(root_run_id, events)


@pytest.mark.parametrize("failing", [0, 1], ids=["written", "failed-once"])
def test_a_packs_due_events_are_written_from_its_threads_in_turn_not_on_its_loop(failing: int) -> None:
    """A pack's events that fall due on their own (its publisher's interval passed, no checkpoint
    took them) are written by its ``PackWrites`` in a thread: on the loop the round trip held every
    branch of the pack (the lag watch saw 0.5-0.9 s in psycopg's ``Connection.wait`` with 10,000
    loops in flight). A failed write gives them back: the pack's last write stores them."""
    from agentloop.loops import ProgressEvent, ProgressStatus
    from agentloop.orchestration.store.seams import ProgressPublisher

    store = ThreadNoting(failing)

    def event(n: int) -> ProgressEvent:
        return ProgressEvent(
            run_id="r", path="b/0", runnable="L", iteration=n, max_iterations=9, phase="x",
            status=ProgressStatus.PROGRESS,
        )  # fmt: skip

    async def pack() -> int:
        publisher = ProgressPublisher(store=store, run_id="r", interval=0)  # every event due at once
        writes = PackWrites(store, "r", events=publisher, offload=_in_a_thread)
        publisher.events_writer = writes.events_due
        for n in range(3):
            publisher(event(n))
            await asyncio.sleep(0)
        await writes.drain()
        publisher.flush(final=True)
        return threading.get_ident()

    loop_thread = asyncio.run(pack())
    assert store.threads and loop_thread not in store.threads[: len(store.threads) - failing]
    assert [e["iteration"] for _, e in store.events("r")] == [0, 1, 2]

"""Issue 36: a packed batch makes each store step of its runs once per pack, not once per run
(``store/batch_rounds.py``, ``store/bulk.py``), and keeps each run's guarantees: a redelivered
pack runs only the runs without a result and never rewrites a run that ended; a store outage in
one round fails the pack, whose retry ends the runs from where they were. On SQLite and
PostgreSQL, through the real tasks (``agentloop.batch_chunk``, ``agentloop.batch_pack``) run in
this process."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from celery import signals
from sqlalchemy import Engine, event

from agentloop import BaseAgentLoop
from agentloop.orchestration.celery_adapter import tasks
from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.errors import StoreUnavailableError
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import SqlRunStore, seams
from agentloop.orchestration.store.base import Ended, Finish, Refused
from agentloop.orchestration.wire import BATCH_CHUNK, BATCH_PACK

RUNNABLE = "rounds.counted"
#: How many times each input's loop ran a step (a loop run twice counts twice).
STEPS: Counter[Any] = Counter()


class Counted(BaseAgentLoop):
    """One awaited step (the packing rule packs it): ``input`` -> ``input + 1``; counts its steps."""

    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> Any:
        return {"n": input}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        STEPS[state["n"]] += 1
        return {"n": state["n"] + 1, "done": True}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state.get("done"))

    def build_result(self, *, state: Any) -> Any:
        return state["n"]


class Rig:
    """An app on ``store`` with no worker: its chunks and packs are applied here, and the packs a
    chunk sends are kept (:meth:`chunk`)."""

    def __init__(self, store: SqlRunStore) -> None:
        registry = RunnableRegistry()
        registry.register(RUNNABLE, Counted)
        self.store = store
        self.app = create_app(
            registry=registry,
            store=store,
            overrides={
                "broker_url": "memory://",
                "result_backend": "cache+memory://",
                "task_default_queue": f"rounds-{uuid.uuid4().hex[:8]}",
            },
        )

    def chunk(self, batch_id: str, inputs: list[Any]) -> list[list[dict[str, Any]]]:
        """Record the runs of ``inputs`` as ``agentloop.batch_chunk`` does; the packs it sent."""
        self.store.create_run(run_id=batch_id, runnable=f"batch:{batch_id}", input={"count": len(inputs)})
        packs: list[list[dict[str, Any]]] = []

        def keep(headers: Any = None, body: Any = None, **_: Any) -> None:
            if (headers or {}).get("task") == BATCH_PACK:
                packs.append(body[0][0])

        signals.before_task_publish.connect(keep, weak=False)
        try:
            self.app.tasks[BATCH_CHUNK].apply(args=(batch_id, RUNNABLE, inputs, 0, {}, None)).get()
        finally:
            signals.before_task_publish.disconnect(keep)
        return packs

    def pack(self, launches: list[dict[str, Any]]) -> Any:
        return self.app.tasks[BATCH_PACK].apply(args=(launches,)).get()

    def runs(self, batch_id: str) -> dict[str, Any]:
        return {run.id: run for run in self.store.list_runs(limit=1000, parent_run_id=batch_id)}

    def events(self, run_id: str) -> list[dict[str, Any]]:
        return [payload for _, payload in self.store.events(run_id)]


@pytest.fixture
def rig(sql_engine: Engine) -> Iterator[Rig]:
    STEPS.clear()
    rig = Rig(SqlRunStore(sql_engine))
    try:
        yield rig
    finally:
        rig.app.close()


def counting(rig: Rig) -> Callable[[], Counter[str]]:
    """Count every public call of the rig's store and every statement it sends from now on; the
    counts so far (``"statements"`` and each method's name)."""
    calls: Counter[str] = Counter()
    store = rig.store
    for name in dir(type(store)):
        member = getattr(store, name)
        if name.startswith("_") or not callable(member) or name in ("engine", "retry"):
            continue

        def counted(*args: Any, __name: str = name, __call: Any = member, **kwargs: Any) -> Any:
            calls[__name] += 1
            return __call(*args, **kwargs)

        setattr(store, name, counted)

    def statement(*_: Any) -> None:
        calls["statements"] += 1

    event.listen(store.engine, "before_cursor_execute", statement)
    return lambda: calls


def test_a_packed_batch_makes_each_store_step_once_per_pack_not_once_per_run(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writes a pack makes on a timer (its events every second, a cancel flag read again after
    # half a second) come at the pack's end only: on a loaded host a pack of 40 outlived those
    # intervals and made one of each more than the pack of 5 (a count, not a verdict on time).
    monkeypatch.setattr(tasks, "EVENTS_INTERVAL", 3600.0)
    monkeypatch.setattr(seams, "time", SimpleNamespace(monotonic=lambda: 1000.0))  # answers stay fresh
    counts = counting(rig)
    seen: dict[int, Counter[str]] = {}
    for size in (5, 40):
        before = Counter(counts())
        (launches,) = rig.chunk(f"b{size}", list(range(size)))
        assert rig.pack(launches) == {"done": size, "failed": 0, "paused": 0, "skipped": 0}
        after = Counter(counts())
        after.subtract(before)
        seen[size] = +after
        assert {run.status for run in rig.runs(f"b{size}").values()} == {"succeeded"}

    # Before: 11 store calls a run, one after another on the pack's event loop (two create_run,
    # run_owner, mark_running, is_cancel_requested, start_loops, finish_loop, two events reads,
    # finish_run), and 13 statements a run. Now each step is one call for the whole pack.
    calls = {name: n for name, n in seen[40].items() if name != "statements"}
    assert calls == {name: n for name, n in seen[5].items() if name != "statements"}
    assert sum(calls.values()) <= 10, calls
    if rig.store.dialect == "postgresql":  # one statement a step (SQLite ends its runs one by one)
        assert seen[40]["statements"] == seen[5]["statements"] <= 12, seen


def test_a_redelivered_batch_pack_runs_only_the_runs_without_a_result(rig: Rig) -> None:
    (launches,) = rig.chunk("again", list(range(6)))
    # The first delivery ended runs 0-2 before its worker died; run 3's loop had recorded its
    # result, its run had not ended (the worker died between the two writes); 4 and 5 never ran.
    assert rig.pack(launches[:3])["done"] == 3
    ended = rig.runs("again")
    events_before = {run_id: rig.events(run_id) for run_id in ended}
    rig.store.mark_running("again-3")
    rig.store.start_loops("again-3", [""])
    rig.store.finish_loop("again-3", "", 103)
    rig.app.backend.forget("again-0")  # it died before writing run 0's result to the backend
    STEPS.clear()

    assert rig.pack(launches) == {"done": 3, "failed": 0, "paused": 0, "skipped": 3}

    runs = rig.runs("again")
    for index in range(3):  # ended: not rewritten, no event added
        run_id = f"again-{index}"
        assert runs[run_id].finished_at == ended[run_id].finished_at
        assert (runs[run_id].status, runs[run_id].output) == ("succeeded", index + 1)
        assert rig.events(run_id) == events_before[run_id]
    assert (runs["again-3"].status, runs["again-3"].output) == ("succeeded", 103)  # its recorded result
    assert (runs["again-4"].status, runs["again-5"].status) == ("succeeded", "succeeded")
    assert dict(STEPS) == {4: 1, 5: 1}  # only the loops without a result ran
    for index in range(6):  # each result in the backend: run 0's written by the redelivery
        assert rig.app.AsyncResult(f"again-{index}").get(timeout=5) == runs[f"again-{index}"].output


class EndsAwayOnce(SqlRunStore):
    """A store away for the first bulk end of runs: the pack's last round fails."""

    away = True

    def _finish_runs(self, asked: list[Finish]) -> list[Ended | Refused]:
        if self.away:
            EndsAwayOnce.away = False
            raise StoreUnavailableError("the run store is away", seconds=0.0)
        return super()._finish_runs(asked)


def test_a_store_outage_in_one_round_fails_the_pack_and_its_retry_ends_the_runs(sql_engine: Engine) -> None:
    STEPS.clear()
    EndsAwayOnce.away = True
    rig = Rig(EndsAwayOnce(sql_engine))
    try:
        (launches,) = rig.chunk("away", list(range(4)))
        counts = rig.pack(launches)  # retried at once (an eager task), as a worker retries it

        assert EndsAwayOnce.away is False and counts["done"] == 4, counts
        runs = rig.runs("away")
        assert {run_id: run.status for run_id, run in runs.items()} == dict.fromkeys(runs, "succeeded")
        assert dict(STEPS) == dict.fromkeys(range(4), 1)  # the retry took each loop's recorded result
        for run_id in runs:  # each loop's events once
            assert [e["phase"] for e in rig.events(run_id)].count("done") == 1, rig.events(run_id)
    finally:
        rig.app.close()


def test_a_run_twice_in_one_pack_runs_once(rig: Rig) -> None:
    (launches,) = rig.chunk("twice", list(range(3)))

    assert rig.pack([*launches, launches[0], launches[2]]) == {
        "done": 3,
        "failed": 0,
        "paused": 0,
        "skipped": 2,
    }

    assert dict(STEPS) == dict.fromkeys(range(3), 1)
    assert {run.status for run in rig.runs("twice").values()} == {"succeeded"}

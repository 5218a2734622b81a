"""Two beat ticks at the same instant start one batch, never two: "create the batch run unless a
batch of this schedule is open" is one atomic step of the run store
(:meth:`~agentloop.orchestration.store.RunStore.create_run_unless_open`), in memory, on SQLite and on
PostgreSQL."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import RunStore
from agentloop.orchestration.wire import BATCH

TICKS = 2
ROUNDS = 10
RACERS = 6


def test_two_ticks_at_the_same_instant_start_one_batch(run_store: RunStore) -> None:
    registry = RunnableRegistry.from_modules(["workflows.parity"])
    both_checked = threading.Barrier(TICKS, timeout=30)

    def inputs() -> list[int]:  # read by each tick after it found no open batch, before it records one
        both_checked.wait()
        return [1, 2]

    registry.register_input_provider("after_both_checked", inputs)
    urls = {"broker_url": "memory://", "result_backend": "cache+memory://"}
    app = create_app(registry=registry, store=run_store, overrides=urls)
    try:

        def tick(index: int) -> Any:
            kwargs = {"runnable": "parity.count", "provider": "after_both_checked", "key": "nightly"}
            return app.tasks[BATCH].apply(kwargs=kwargs, task_id=f"tick-{index}").get()

        with ThreadPoolExecutor(TICKS) as pool:
            answers = list(pool.map(tick, range(TICKS)))
    finally:
        app.close()
    started = [answer for answer in answers if "batch_id" in answer]
    skipped = [answer for answer in answers if answer.get("skipped")]
    assert len(started) == 1 and len(skipped) == TICKS - 1, answers
    assert skipped[0]["running"] == started[0]["batch_id"]
    batches = run_store.list_runs(runnable="batch:nightly")
    assert [run.id for run in batches] == [started[0]["batch_id"]]


def test_of_many_callers_at_once_one_creates_the_run_and_the_others_get_it(
    run_store: RunStore,
) -> None:
    for round_ in range(ROUNDS):
        at_once = threading.Barrier(RACERS, timeout=30)

        def race(index: int, round_: int = round_, at_once: threading.Barrier = at_once) -> str:
            at_once.wait()
            record = run_store.create_run_unless_open(
                run_id=f"r{round_}-{index}", runnable="batch:race", input={"round": round_}
            )
            return record.id

        with ThreadPoolExecutor(RACERS) as pool:
            winners = set(pool.map(race, range(RACERS)))
        assert len(winners) == 1, winners
        (winner,) = winners
        assert len(run_store.list_runs(runnable="batch:race", status="pending")) == 1
        run_store.finish_run(winner, status="succeeded")  # ended: the next round may open one
    assert len(run_store.list_runs(runnable="batch:race", limit=100)) == ROUNDS


def test_a_redelivered_tick_finds_its_own_run_and_an_ended_batch_does_not_block(run_store: RunStore) -> None:
    first = run_store.create_run_unless_open(run_id="a", runnable="batch:x", input={"count": 1})
    assert first.id == "a" and first.status == "pending"
    assert run_store.create_run_unless_open(run_id="a", runnable="batch:x", input={"count": 1}).id == "a"
    assert run_store.create_run_unless_open(run_id="b", runnable="batch:x", input={"count": 1}).id == "a"
    assert run_store.get_run("b") is None
    assert run_store.create_run_unless_open(run_id="c", runnable="batch:other", input=None).id == "c"
    run_store.finish_run("a", status="failed", error={"type": "X", "message": "x"})
    assert run_store.create_run_unless_open(run_id="b", runnable="batch:x", input={"count": 2}).id == "b"
    record = run_store.get_run("b")
    assert record is not None and record.input == {"count": 2} and record.root_run_id == "b"


@pytest.mark.parametrize("value", ["\x00", "x" * 300])
def test_a_run_id_the_store_cannot_hold_is_a_clear_error(run_store: RunStore, value: str) -> None:
    with pytest.raises(ValueError):
        run_store.create_run_unless_open(run_id=value, runnable="batch:x", input=None)

"""Concurrency keys' slots (``store/concurrency.py``) on SQLite, PostgreSQL and in memory: limits
in arrival order, refusals, the oldest run cancelled to make room, fair shares between keys,
slots that free without anyone releasing them (the run ended, the lease ran out), and threads
waiting for their key's turn without a database connection."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import Engine, text

from agentloop.orchestration.store import RunStore, SqlRunStore, create_engine_for
from agentloop.orchestration.store.concurrency import ConcurrencySlots, SqlConcurrencySlots


def slots_of(store: RunStore) -> ConcurrencySlots:
    slots = getattr(store, "concurrency")  # noqa: B009 - both stores have one
    assert isinstance(slots, ConcurrencySlots)
    return slots


def runs(store: RunStore, *ids: str) -> None:
    for run_id in ids:
        store.create_run(run_id=run_id, runnable="r", input=None)


def acquire(slots: ConcurrencySlots, run_id: str, key: str, **options: Any) -> Any:
    return slots.acquire(run_id=run_id, key=key, **{"limit": 2, **options})


def test_a_key_admits_up_to_its_limit_and_then_in_the_order_runs_arrived(run_store: RunStore) -> None:
    slots = slots_of(run_store)
    runs(run_store, "a1", "a2", "a3", "a4")
    assert [acquire(slots, run, "A").admitted for run in ("a1", "a2", "a3", "a4")] == [
        True,
        True,
        False,
        False,
    ]
    assert (acquire(slots, "a4", "A").ahead, acquire(slots, "a3", "A").ahead) == (1, 0)

    run_store.finish_run("a1", status="succeeded", output=None)  # ending frees the slot: no release call
    assert acquire(slots, "a4", "A").admitted is False  # a3 arrived first: the slot is its
    assert acquire(slots, "a3", "A").admitted is True
    again = acquire(slots, "a3", "A")  # a redelivered launch keeps its slot
    assert (again.admitted, again.in_flight) == (True, 2)
    counts = slots.counts()["A"]
    assert (counts.held, counts.waiting) == (2, 1)
    assert counts.waits >= 3
    assert slots.keys_of(["a1", "a4", "nobody"]) == {"a1": "A", "a4": "A"}


def test_keys_are_counted_apart(run_store: RunStore) -> None:
    slots = slots_of(run_store)
    runs(run_store, "a1", "a2", "b1")
    assert acquire(slots, "a1", "A", limit=1).admitted
    assert not acquire(slots, "a2", "A", limit=1).admitted
    assert acquire(slots, "b1", "B", limit=1).admitted


def test_a_refusing_runnable_is_refused_past_the_limit_and_stays_refused(run_store: RunStore) -> None:
    slots = slots_of(run_store)
    runs(run_store, "a1", "a2")
    assert acquire(slots, "a1", "A", limit=1, on_limit="refuse").admitted
    refused = acquire(slots, "a2", "A", limit=1, on_limit="refuse")
    assert (refused.admitted, refused.refused, refused.in_flight, refused.limit) == (False, True, 1, 1)
    run_store.finish_run("a1", status="succeeded", output=None)
    assert acquire(slots, "a2", "A", limit=1, on_limit="refuse").refused  # a redelivery: still refused
    assert slots.counts()["A"].refused == 1


def test_cancel_oldest_gives_the_oldest_runs_slot_to_the_newcomer(run_store: RunStore) -> None:
    slots = slots_of(run_store)
    runs(run_store, "a1", "a2", "a3")
    assert acquire(slots, "a1", "A", on_limit="cancel_oldest").admitted
    assert acquire(slots, "a2", "A", on_limit="cancel_oldest").admitted
    third = acquire(slots, "a3", "A", on_limit="cancel_oldest")
    assert (third.admitted, third.evicted, third.in_flight) == (True, "a1", 2)
    assert acquire(slots, "a1", "A", on_limit="cancel_oldest").refused  # the evicted run never comes back
    assert slots.counts()["A"].evicted == 1


def test_fair_slots_split_between_the_keys_that_have_work(run_store: RunStore) -> None:
    slots = slots_of(run_store)
    a_runs = [f"a{i}" for i in range(6)]
    runs(run_store, *a_runs, "b0", "b1", "b2", "b3")
    fair = {"limit": None, "fair_slots": 4}
    # alone, key A takes every fair slot
    assert [acquire(slots, run, "A", **fair).admitted for run in a_runs] == [True] * 4 + [False] * 2
    # B arrives: the share is 4 // 2 = 2; A holds 4, so B's first waits... no: B holds 0 < 2
    assert acquire(slots, "b0", "B", **fair).admitted
    assert acquire(slots, "b1", "B", **fair).admitted
    assert not acquire(slots, "b2", "B", **fair).admitted  # B has its share
    for run in a_runs[:4]:  # A's runs end: A's waiters get at most the share back
        run_store.finish_run(run, status="succeeded", output=None)
    assert [acquire(slots, run, "A", **fair).admitted for run in a_runs[4:]] == [True, True]
    assert not acquire(slots, "b2", "B", **fair).admitted  # 2 of A, 2 of B: the fleet's 4
    counts = slots.counts()
    assert (counts["A"].held, counts["B"].held, counts["B"].waiting) == (2, 2, 1)


def test_a_slot_whose_lease_ran_out_is_free_without_a_release(run_store: RunStore) -> None:
    slots = slots_of(run_store)
    runs(run_store, "a1", "a2")
    assert acquire(slots, "a1", "A", limit=1, lease_seconds=0).admitted  # its lease is over at once
    assert acquire(slots, "a2", "A", limit=1).admitted


def launch_message(run_id: str) -> dict[str, Any]:
    return {
        "task": "agentloop.launch",
        "args": [],
        "kwargs": {"run_id": run_id},
        "task_id": run_id,
        "priority": 9,
    }


def park(slots: ConcurrencySlots, run_id: str, key: str, **options: Any) -> Any:
    return acquire(slots, run_id, key, message=launch_message(run_id), **options)


def test_a_freed_slot_wakes_the_head_of_its_keys_line_once(run_store: RunStore) -> None:
    slots = slots_of(run_store)
    runs(run_store, "a1", "a2", "a3", "a4", "b1")
    assert [park(slots, run, "A").admitted for run in ("a1", "a2", "a3", "a4")] == [True, True, False, False]
    assert slots.wake(keys=["A"]) == []  # nothing freed: nobody woken
    run_store.finish_run("a1", status="succeeded", output=None)
    woken = slots.wake(keys=["A"])
    assert [(wake.run_id, wake.key, wake.message) for wake in woken] == [("a3", "A", launch_message("a3"))]
    assert slots.wake(keys=["A"]) == []  # a3's wake is on its way: not sent twice, a4 not woken
    assert park(slots, "a3", "A", copy="w-a3").admitted
    assert park(slots, "a4", "A").admitted is False
    run_store.finish_run("a2", status="succeeded", output=None)
    assert [wake.run_id for wake in slots.wake(keys=["A"])] == ["a4"]
    assert [wake.run_id for wake in slots.wake(keys=["B"])] == []  # another key's line: untouched


def test_only_the_copy_holding_the_slot_runs_and_one_copy_carries_the_backstop(run_store: RunStore) -> None:
    slots = slots_of(run_store)
    runs(run_store, "a1", "a2")
    assert park(slots, "a1", "A", limit=1).admitted
    first = park(slots, "a2", "A", limit=1)  # the client's message (no token): parks, sends a backstop
    assert (first.admitted, first.carrier) == (False, True)
    slots.parked("a2", backstop="b-1", seconds=30.0)
    assert park(slots, "a2", "A", limit=1).carrier is False  # its redelivery: b-1 is on its way
    assert park(slots, "a2", "A", limit=1, copy="w-1").carrier is False  # a wake that came too soon
    assert park(slots, "a2", "A", limit=1, copy="b-1").carrier is True  # the backstop itself
    run_store.finish_run("a1", status="succeeded", output=None)
    held = park(slots, "a2", "A", limit=1, copy="w-2")
    assert (held.admitted, held.duplicate) == (True, False)
    late = park(slots, "a2", "A", limit=1, copy="b-1")  # the backstop, after the wake took the slot
    assert (late.admitted, late.duplicate) == (False, True)
    again = park(slots, "a2", "A", limit=1, copy="w-2")  # the holder's copy redelivered: goes on
    assert (again.admitted, again.duplicate) == (True, False)


def test_weighted_keys_are_admitted_in_proportion_while_both_wait(run_store: RunStore) -> None:
    """Keys C (weight 2) and D (weight 1), 30 runs each waiting on 3 fair slots: each time a run
    ends, the store wakes whom it may start. Counted: the admissions of each key while both had
    runs waiting are 2:1 (within one run)."""
    slots = slots_of(run_store)
    c_runs, d_runs = [f"c{i:02}" for i in range(30)], [f"d{i:02}" for i in range(30)]
    runs(run_store, *c_runs, *d_runs)
    fair = {"limit": None, "fair_slots": 3}
    order: list[str] = []
    for c_run, d_run in zip(c_runs, d_runs, strict=True):  # equal backlogs, arriving together
        for run_id, key, weight in ((c_run, "C", 2), (d_run, "D", 1)):
            if park(slots, run_id, key, weight=weight, **fair).admitted:
                order.append(run_id)
    ended = 0
    while ended < len(order) < 60:
        run_store.finish_run(order[ended], status="succeeded", output=None)  # the oldest ends
        ended += 1
        for wake in slots.wake(fair_slots=3):
            key, weight = ("C", 2) if wake.key == "C" else ("D", 1)
            if park(slots, wake.run_id, key, weight=weight, copy=f"w-{wake.run_id}", **fair).admitted:
                order.append(wake.run_id)
        assert len(order) - ended <= 3  # never more than the fair slots in flight
    assert len(order) == 60
    both_waiting = order[: order.index(c_runs[-1])]  # until C's backlog is done
    c_count = sum(1 for run_id in both_waiting if run_id.startswith("c"))
    d_count = len(both_waiting) - c_count
    assert abs(c_count - 2 * d_count) <= 2, (c_count, d_count)


@pytest.mark.integration
def test_threads_waiting_for_their_keys_turn_hold_no_database_connection(pg_engine: Engine) -> None:
    """Another process holds key K's turn (its advisory lock); five threads of this process ask
    for slots of K on a pool of three connections. Counted: two of them wait in PostgreSQL, each
    on a connection (the next in line is ready when the lock passes), the others in this process,
    so a connection is left for a run of another key (before, the five held all three connections
    and the other key's run waited for the pool). Once K's turn is free, all five are admitted."""
    url = pg_engine.url.render_as_string(hide_password=False)
    engine = create_engine_for(url, pool_size=3, max_overflow=0)
    try:
        store = SqlRunStore(engine)
        slots, key = store.concurrency, f"K-{uuid.uuid4().hex}"
        ids = [f"{key}-{i}" for i in range(5)]
        runs(store, *ids, f"{key}-other")
        other_process = SqlConcurrencySlots(pg_engine, dialect="postgresql")
        with ThreadPoolExecutor(5) as threads:
            with other_process._serialized(("run", key)):
                asked = [threads.submit(lambda run: acquire(slots, run, key, limit=10), run) for run in ids]
                _until(lambda: _advisory_waiters(pg_engine) >= 2)
                _until(lambda: engine.pool.checkedout() >= 3, timeout=1.0, required=False)  # before: at once
                assert engine.pool.checkedout() == 2
                assert _advisory_waiters(pg_engine) == 2
                assert acquire(slots, f"{key}-other", f"{key}-other").admitted  # on the connection left
                assert not any(future.done() for future in asked)
            assert [future.result(timeout=30).admitted for future in asked] == [True] * 5
        assert len(slots.turns) == 0  # no lock is kept once nobody waits
    finally:
        engine.dispose()


def _advisory_waiters(engine: Engine) -> int:
    """Sessions of ``engine``'s database waiting for an advisory lock."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
    )
    with engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


def _until(check: Any, *, timeout: float = 30.0, required: bool = True) -> None:
    """Poll ``check`` until it holds (bounded: ``timeout`` s, past which it fails if ``required``)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            assert not required, "the condition did not come"
            return
        time.sleep(0.01)


def test_a_freed_slot_wakes_the_head_of_the_line_though_a_wake_behind_it_is_on_its_way(
    run_store: RunStore,
) -> None:
    """Found by ``test_fair_wakes_never_strand_a_key.py``: the head of a line, woken, parked again
    when its key's share shrank; a slot that freed then was counted as taken by the wake still on
    its way to the run behind it, which parks again too (the head is ahead of it). Nobody was left
    to wake either until a backstop. The room now goes to the head of the line."""
    slots = slots_of(run_store)
    runs(run_store, "e0", "e1", "e2", "e3", "e4", "c0")
    fair = {"limit": None, "fair_slots": 3}
    assert [park(slots, run, "E", **fair).admitted for run in ("e0", "e1", "e2", "e3", "e4")] == [
        True, True, True, False, False,
    ]  # fmt: skip
    run_store.finish_run("e0", status="succeeded", output=None)
    assert [wake.run_id for wake in slots.wake(fair_slots=3)] == ["e3"]
    run_store.finish_run("e1", status="succeeded", output=None)
    assert [wake.run_id for wake in slots.wake(fair_slots=3)] == ["e4"]
    assert park(slots, "c0", "C", weight=2, **fair).admitted  # E's share is now 3 * 1 // 3 = 1
    assert not park(slots, "e3", "E", copy="w-e3", **fair).admitted  # e2 holds E's one slot
    run_store.finish_run("e2", status="succeeded", output=None)
    assert [wake.run_id for wake in slots.wake(fair_slots=3)] == ["e3"]  # not e4's wake, on its way
    assert not park(slots, "e4", "E", copy="w-e4", **fair).admitted  # e3 is ahead of it
    assert park(slots, "e3", "E", copy="w-e3b", **fair).admitted

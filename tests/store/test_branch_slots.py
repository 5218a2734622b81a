"""A key's branch slots (``store/concurrency.py``: ``kind="branch"``, :meth:`release`) on SQLite,
PostgreSQL and in memory: a line of its own beside the key's runs, bounded by the branch limit
alone (never by fair shares, never counted as a key), released by the branch's task, a released
slot's late copies are duplicates while its holder's own copy asks anew, and parked branches are
woken with their message."""

from __future__ import annotations

from agentloop.orchestration.store import RunStore
from agentloop.orchestration.store.concurrency import Admission, ConcurrencySlots, KeyCounts, branch_holder
from tests.store.test_concurrency_slots import runs, slots_of

LINE = ["A"]  # the key whose line of branch slots the tests wake


def branch(
    slots: ConcurrencySlots, path: str, *, copy: str | None = None, fair_slots: int | None = None
) -> Admission:
    return slots.acquire(
        run_id=branch_holder("r1", path),
        key="A",
        kind="branch",
        limit=2,
        copy=copy,
        fair_slots=fair_slots,
        message={"task": "agentloop.run", "args": [path], "options": {"task_id": path}},
    )


def test_branches_are_admitted_up_to_the_limit_and_released_by_their_task(run_store: RunStore) -> None:
    slots = slots_of(run_store)
    runs(run_store, "r1")
    admitted = [branch(slots, f"b{n}").admitted for n in range(4)]
    assert admitted == [True, True, False, False]
    assert slots.wake(keys=LINE, kind="branch") == []  # no slot is free: nobody is woken

    slots.release(branch_holder("r1", "b0"))
    woken = slots.wake(keys=LINE, kind="branch")
    assert [(wake.run_id, wake.message["args"]) for wake in woken] == [(branch_holder("r1", "b2"), ["b2"])]
    assert branch(slots, "b3").admitted is False  # b2 came first: the slot is its
    assert branch(slots, "b2").admitted is True
    again = branch(slots, "b2")  # a redelivered task keeps its slot, never counted twice
    assert (again.admitted, again.in_flight) == (True, 2)


def test_a_released_slots_late_copy_runs_nothing_and_its_holders_own_copy_asks_anew(
    run_store: RunStore,
) -> None:
    slots = slots_of(run_store)
    runs(run_store, "r1")
    assert branch(slots, "b0", copy="wake").admitted
    slots.release(branch_holder("r1", "b0"))
    assert branch(slots, "b0", copy="backstop").duplicate  # the branch ran: not again
    retried = branch(slots, "b0", copy="wake")  # its own copy (a resumption): a slot again
    assert (retried.admitted, retried.duplicate) == (True, False)


def test_branch_slots_are_neither_keys_nor_in_their_fair_shares(run_store: RunStore) -> None:
    slots = slots_of(run_store)
    runs(run_store, "a1", "b1")
    assert slots.acquire(run_id="a1", key="A", limit=None, fair_slots=2).admitted
    assert slots.acquire(run_id="b1", key="B", limit=None, fair_slots=2).admitted
    # two keys share two fair slots; the branch line is bounded by its limit alone
    assert [branch(slots, f"b{n}", fair_slots=2).admitted for n in range(3)] == [True, True, False]
    assert set(slots.counts()) == {"A", "B"}
    assert (slots.counts()["A"].held, slots.counts()["A"].branches_held) == (1, 2)  # runs apart
    assert slots.keys_of([branch_holder("r1", "b0"), "a1"]) == {"a1": "A"}  # a branch is no run
    assert len(branch_holder("r" * 255, "p")) <= 255


def test_a_pack_takes_its_branches_slots_at_once_and_is_woken_when_all_fit(run_store: RunStore) -> None:
    slots = slots_of(run_store)
    runs(run_store, "r1")

    def pack(first: str) -> Admission:
        holder = branch_holder("r1", first)
        return slots.acquire(
            run_id=holder, key="A", kind="branch", limit=2, weight=2, message={"task": "agentloop.pack"}
        )

    assert branch(slots, "b0").admitted
    waiting = pack("p0")  # two branches, one slot free: the pack waits for both
    assert (waiting.admitted, waiting.in_flight) == (False, 1)
    assert not branch(slots, "b1").admitted  # the pack came first: the free slot waits for it
    # a pack's row counts as its branches; the key has no run in the slots
    assert slots.counts()["A"] == KeyCounts(branches_held=1, branches_waiting=3)
    slots.release(branch_holder("r1", "b0"))
    assert [wake.run_id for wake in slots.wake(keys=LINE, kind="branch")] == [branch_holder("r1", "p0")]
    taken = pack("p0")
    assert (taken.admitted, taken.in_flight) == (True, 2)
    slots.release(branch_holder("r1", "p0"))
    assert branch(slots, "b1").admitted


def test_a_waiting_branch_given_up_holds_up_nobody(run_store: RunStore) -> None:
    slots = slots_of(run_store)
    runs(run_store, "r1")
    assert [branch(slots, f"b{n}").admitted for n in range(3)] == [True, True, False]
    slots.release(branch_holder("r1", "b2"), waiting=True)  # its run ended while it waited
    slots.release(branch_holder("r1", "b1"), waiting=True)  # held (by a copy running): stays held
    assert not branch(slots, "b9").admitted
    slots.release(branch_holder("r1", "b9"), waiting=True)
    slots.release(branch_holder("r1", "b0"))
    assert slots.wake(keys=LINE, kind="branch") == []  # nobody waits
    assert branch(slots, "b3").admitted  # nobody ahead of it

"""Retention deletes the concurrency slot rows that stopped counting long ago, on every store: a
branch's slot given up when its task ended stayed in ``concurrency_slots`` for ever before (every
branch of every keyed run under a branch limit left a row). Rows that still count stay, and the
SQL store deletes in batches of :data:`FORGET_BATCH` rows per transaction."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, event

from agentloop.orchestration.store import RunStore, SqlRunStore
from agentloop.orchestration.store import concurrency as concurrency_module
from agentloop.orchestration.store.concurrency import KeyCounts, branch_holder
from agentloop.orchestration.store.retention import prune_runs
from tests.store.test_concurrency_slots import runs, slots_of


def test_a_prune_deletes_the_slot_rows_given_up_before_its_cut_off_and_keeps_the_rest(
    run_store: RunStore,
) -> None:
    slots = slots_of(run_store)
    runs(run_store, "r1", "r2")
    assert slots.acquire(run_id="r1", key="A", limit=1).admitted
    assert not slots.acquire(run_id="r2", key="A", limit=1).admitted  # waits: counts
    for n in range(3):
        assert slots.acquire(run_id=branch_holder("r1", f"b{n}"), key="A", kind="branch", limit=5).admitted
    slots.release(branch_holder("r1", "b0"))
    slots.release(branch_holder("r1", "b1"))
    cut_off = datetime.now(UTC) + timedelta(seconds=1)  # the rows that count have a minute or more

    dry = prune_runs(run_store, before=cut_off, dry_run=True)
    assert (dry.workflows, dry.slots, dry.to_dict()["slots"]) == (0, 2, 2)
    assert prune_runs(run_store, before=cut_off).slots == 2
    assert prune_runs(run_store, before=cut_off).slots == 0  # nothing left to delete
    assert slots.counts() == {"A": KeyCounts(held=1, waiting=1, waits=1, branches_held=1)}

    # a forgotten branch's late copy is a new place: it asks as a branch never seen
    again = slots.acquire(run_id=branch_holder("r1", "b0"), key="A", kind="branch", limit=5)
    assert (again.admitted, again.in_flight) == (True, 2)


def test_the_sql_store_forgets_in_bounded_batches(
    sql_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqlRunStore(sql_engine)
    runs(store, "r1")
    for n in range(7):
        store.concurrency.acquire(run_id=branch_holder("r1", f"b{n}"), key="A", kind="branch", limit=10)
        store.concurrency.release(branch_holder("r1", f"b{n}"))
    cut_off = datetime.now(UTC) + timedelta(seconds=1)  # the rows that count have a minute or more
    monkeypatch.setattr(concurrency_module, "FORGET_BATCH", 3)
    commits: list[int] = []
    listener = lambda connection: commits.append(1)  # noqa: E731 - one line
    event.listen(sql_engine, "commit", listener)
    try:
        assert store.concurrency.forget(before=cut_off) == 7
    finally:
        event.remove(sql_engine, "commit", listener)
    assert len(commits) == 3  # 3 + 3 + 1 rows, a transaction each
    assert store.concurrency.forget(before=cut_off, dry_run=True) == 0

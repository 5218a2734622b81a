"""Migration 0016 on SQLite and PostgreSQL: a database at 0015 whose key had a line of branch
slots (``<key>\\x1fbranches``), a held branch slot and a parked pack in it, upgraded: the rows are
``kind='branch'`` rows of the plain key, still counted, released and woken as branch slots; and
down again, the line has its old name."""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy import Column, Integer, MetaData, String, Table, Text, select

from agentloop.orchestration.store import SqlRunStore, create_engine_for, downgrade_database, upgrade_database
from agentloop.orchestration.store.concurrency import KeyCounts, branch_holder
from agentloop.orchestration.store.tables import UtcDateTime, concurrency_slots, utcnow

#: ``concurrency_slots`` as revision 0015 made it (no ``kind``).
AT_0015 = Table(
    "concurrency_slots",
    MetaData(),
    Column("run_id", String(255), primary_key=True),
    Column("key", String(255)),
    Column("state", String(16)),
    Column("queued_at", UtcDateTime()),
    Column("lease_until", UtcDateTime()),
    Column("waits", Integer),
    Column("weight", Integer),
    Column("bound", Integer),
    Column("message", Text),
)
OLD_LINE = "A\x1fbranches"


def test_a_line_of_branch_slots_at_0015_is_counted_released_and_woken_after_0016(
    blank_database_url: str,
) -> None:
    upgrade_database(blank_database_url, "0015")
    engine = create_engine_for(blank_database_url)
    try:
        now = utcnow()
        lease = now + timedelta(hours=1)
        row = {"queued_at": now, "lease_until": lease, "waits": 0, "bound": 2, "message": None}
        pack = {"task": "agentloop.pack", "args": ["p0"]}
        with engine.begin() as connection:
            connection.execute(
                AT_0015.insert(),
                [
                    {**row, "run_id": "r1", "key": "A", "state": "held", "weight": 1},
                    {**row, "run_id": branch_holder("r1", "b0"), "key": OLD_LINE, "state": "held",
                     "weight": 1},
                    {**row, "run_id": branch_holder("r1", "p0"), "key": OLD_LINE, "state": "waiting",
                     "weight": 2, "queued_at": now + timedelta(seconds=1), "message": json.dumps(pack)},
                ],
            )  # fmt: skip
        upgrade_database(blank_database_url)
        store = SqlRunStore(engine)
        store.create_run(run_id="r1", runnable="r", input=None)
        slots = store.concurrency

        assert slots.counts() == {"A": KeyCounts(held=1, branches_held=1, branches_waiting=2)}
        assert slots.keys_of(["r1", branch_holder("r1", "b0")]) == {"r1": "A"}
        assert slots.wake(keys=["A"], kind="branch") == []  # one of two slots free: the pack waits
        slots.release(branch_holder("r1", "b0"))
        assert slots.counts()["A"].branches_held == 0
        woken = slots.wake(keys=["A"], kind="branch")
        assert [(wake.run_id, wake.kind, wake.message) for wake in woken] == [
            (branch_holder("r1", "p0"), "branch", pack)
        ]
        taken = slots.acquire(run_id=branch_holder("r1", "p0"), key="A", kind="branch", limit=2, weight=2)
        assert (taken.admitted, taken.in_flight) == (True, 2)

        downgrade_database(blank_database_url, "0015")
        with engine.connect() as connection:
            keys = dict(connection.execute(select(AT_0015.c.run_id, AT_0015.c.key)).all())
        assert keys == {"r1": "A", branch_holder("r1", "b0"): OLD_LINE, branch_holder("r1", "p0"): OLD_LINE}
        upgrade_database(blank_database_url)
        with engine.connect() as connection:
            kinds = set(connection.execute(select(concurrency_slots.c.kind, concurrency_slots.c.key)).all())
        assert kinds == {("run", "A"), ("branch", "A")}
    finally:
        engine.dispose()

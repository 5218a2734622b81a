"""``python -m bench store_volume [--size RUNS] [--rounds N] [--quick]``: the viewer's and the API's
queries on a PostgreSQL run store of 100,000 runs and 1,000,000 events.

A private PostgreSQL database (``tests.services.postgres``) is migrated to head
and filled with COPY: ``--size`` root runs (100,000; 10,000 with ``--quick``),
ten progress events each, a checkpoint each; 20 runnables of Zipf-like
popularity (the rarest has a few dozen runs), 1 % of runs under 100 batch
parents, the statuses of a live deployment (most succeeded, some failed,
running, waiting, a few cancelled), 50 HTTP principals on half the runs,
created over 60 days. Then ``ANALYZE``.

Each query is the store's own call (beside a floor, ``SELECT 1`` through the
same engine, which shows this machine's round trip and load), the one ``agentloop serve``'s REST,
GraphQL, SSE and viewer endpoints make (``orchestration/web/service.py``,
``progress.py``): the runs list (50, newest first) unfiltered, by status, by
runnable, by both, by principal (a non-admin caller), by principal and
status, page 21 (offset 1,000); one run; a run's children summary; a run's
events after an id (one SSE page). Each is called ``--rounds`` times (200,
50 with ``--quick``) with parameters drawn at random and printed as p50/p95
in milliseconds, both the whole store call and the server's execution time
of its statement (``EXPLAIN (ANALYZE, TIMING OFF)``), twice in the same run:
with the indexes of migration 0007 only (those of 0009 dropped), then with
every index of head. The target is a p95 under 50 ms for each, with head's
indexes; ``EXPLAIN ANALYZE`` of one call per query names the index each uses.
"""

from __future__ import annotations

import json
import random
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench import BenchOptions

NAME = "store_volume"
SUMMARY = "runs list / one run / events after an id on PostgreSQL, 100,000 runs and 1,000,000 events"

#: Every query's p95 must stay under this, with head's indexes.
TARGET_MS = 50.0
EVENTS_PER_RUN = 10
RUNNABLES = [f"agent.{name}" for name in ("search", "triage", "summarize", "classify", "extract")] + [
    f"agent.tool_{n}" for n in range(15)
]
PRINCIPALS = [f"user-{n}" for n in range(50)]
#: (status, share) of a live deployment's runs.
STATUSES = [
    ("succeeded", 0.80),
    ("failed", 0.08),
    ("degraded", 0.04),
    ("running", 0.03),
    ("waiting", 0.02),
    ("pending", 0.02),
    ("cancelled", 0.005),
    ("deadline_exceeded", 0.005),
]
#: The indexes migration 0009 adds (dropped for the "0007 indexes" side).
NEW_INDEXES = {
    "ix_runs_created_at_id": "CREATE INDEX ix_runs_created_at_id ON runs (created_at, id)",
    "ix_runs_runnable_created_at": "CREATE INDEX ix_runs_runnable_created_at ON runs (runnable, created_at)",
    "ix_runs_finished_at": "CREATE INDEX ix_runs_finished_at ON runs (finished_at)",
}


def fill(url: str, *, runs: int, seed: int = 7) -> dict[str, Any]:
    """Fill the migrated database at ``url``; returns what the queries draw their parameters from."""
    import psycopg
    from sqlalchemy.engine import make_url

    rng = random.Random(seed)
    weights = [1 / (rank + 1) ** 1.5 for rank in range(len(RUNNABLES))]
    statuses, shares = zip(*STATUSES, strict=True)
    now = datetime.now(UTC)
    batches = [f"batch-{n}" for n in range(100)]
    run_rows: list[tuple[Any, ...]] = []
    ids: list[str] = []
    for batch in batches:
        created = now - timedelta(days=60 * rng.random())
        run_rows.append(
            (batch, batch, None, "agent.batch", "succeeded", None, created, created + timedelta(minutes=5))
        )
    for n in range(runs):
        run_id = uuid.UUID(int=rng.getrandbits(128)).hex
        ids.append(run_id)
        status = rng.choices(statuses, shares)[0]
        created = now - timedelta(days=60 * rng.random())
        ended = (
            created + timedelta(seconds=rng.uniform(1, 600))
            if status not in ("running", "waiting", "pending")
            else None
        )
        parent = batches[n % 100] if rng.random() < 0.01 else None
        principal = rng.choice(PRINCIPALS) if rng.random() < 0.5 else None
        run_rows.append(
            (run_id, run_id, parent, rng.choices(RUNNABLES, weights)[0], status, principal, created, ended)
        )
    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    started = time.perf_counter()
    with psycopg.connect(conninfo) as connection, connection.cursor() as cursor:
        with cursor.copy(
            "COPY runs (id, root_run_id, parent_run_id, runnable, status, principal, created_at, finished_at,"
            " path, input, output) FROM STDIN"
        ) as copy:
            for run_id, root, parent, runnable, status, principal, created, ended in run_rows:
                row = (run_id, root, parent, runnable, status, principal, created, ended)
                copy.write_row((*row, "", '{"message": "q"}', None))
        with cursor.copy(
            "COPY run_events (run_id, path, status, phase, iteration, payload, created_at) FROM STDIN"
        ) as copy:
            for run_id in ids:
                for iteration in range(EVENTS_PER_RUN):
                    payload = {
                        "run_id": run_id, "path": "pipeline/0", "runnable": "agent.search",
                        "iteration": iteration, "max_iterations": EVENTS_PER_RUN, "phase": "iteration",
                        "status": "progress", "message": f"step {iteration} of {EVENTS_PER_RUN}",
                        "data": {"tool": "search", "hits": iteration}, "at": 1.7e9 + iteration,
                    }  # fmt: skip
                    copy.write_row(
                        (run_id, "pipeline/0", "progress", "iteration", iteration, json.dumps(payload), now)
                    )
        with cursor.copy(
            "COPY checkpoints (run_id, path, iteration, state, finished, updated_at) FROM STDIN"
        ) as copy:
            for run_id in ids:
                copy.write_row((run_id, "pipeline/0", EVENTS_PER_RUN, '{"n": 10}', True, now))
        connection.commit()
        connection.autocommit = True
        cursor.execute("VACUUM ANALYZE")
    seconds = time.perf_counter() - started
    return {"ids": ids, "batches": batches, "fill_seconds": seconds, "events": runs * EVENTS_PER_RUN}


def queries(store: Any, data: dict[str, Any], rng: random.Random) -> dict[str, Callable[[], Any]]:
    """Each query of the viewer and the API, drawing its parameters from ``rng``."""
    ids, batches = data["ids"], data["batches"]
    statuses = [status for status, _ in STATUSES]

    def events_after() -> Any:
        run_id = rng.choice(ids)
        return store.events(run_id, after_id=0, limit=1000)

    def floor() -> Any:
        with store.engine.connect() as connection:
            return connection.exec_driver_sql("SELECT 1").scalar_one()

    return {
        "floor: SELECT 1": floor,
        "runs list, no filter": lambda: store.list_runs(limit=50),
        "runs list, by status": lambda: store.list_runs(limit=50, status=rng.choice(statuses)),
        "runs list, by runnable": lambda: store.list_runs(limit=50, runnable=rng.choice(RUNNABLES)),
        "runs list, status+runnable": lambda: store.list_runs(
            limit=50, status=rng.choice(statuses), runnable=rng.choice(RUNNABLES)
        ),
        "runs list, by principal": lambda: store.list_runs(limit=50, principal=rng.choice(PRINCIPALS)),
        "runs list, principal+status": lambda: store.list_runs(
            limit=50, principal=rng.choice(PRINCIPALS), status=rng.choice(statuses)
        ),
        "runs list, offset 1000": lambda: store.list_runs(limit=50, offset=1000),
        "one run": lambda: store.get_run(rng.choice(ids)),
        "children summary": lambda: store.summarize_children(rng.choice(batches)),
        "events after an id": events_after,
    }


def measure(store: Any, data: dict[str, Any], *, rounds: int) -> dict[str, dict[str, Any]]:
    """Per query: p50/p95 ms of the store call, p50/p95 ms the server spent on its statement
    (``EXPLAIN (ANALYZE, TIMING OFF)``'s execution time), and the scans of its plan."""
    from sqlalchemy import event

    captured: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if not statement.startswith("EXPLAIN"):
            captured.append((statement, parameters))

    calls = queries(store, data, random.Random(11))
    for call in calls.values():
        call()  # warm: the plan cache and the pool
    walls: dict[str, list[float]] = {name: [] for name in calls}
    servers: dict[str, list[float]] = {name: [] for name in calls}
    scans: dict[str, str] = {}
    for _ in range(rounds):  # interleaved: every query once per round
        for name, call in calls.items():
            started = time.perf_counter()
            call()
            walls[name].append((time.perf_counter() - started) * 1000)
    event.listen(store.engine, "before_cursor_execute", capture)
    try:
        with store.engine.connect() as connection:
            for _ in range(rounds):
                for name, call in calls.items():
                    captured.clear()
                    call()
                    statement, parameters = captured[-1]
                    explain = "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + statement
                    plan = connection.exec_driver_sql(explain, parameters).scalar_one()[0]
                    servers[name].append(float(plan["Execution Time"]))
            for name, call in calls.items():
                captured.clear()
                call()
                statement, parameters = captured[-1]
                lines = connection.exec_driver_sql("EXPLAIN ANALYZE " + statement, parameters).scalars().all()
                scans[name] = _scans(list(lines))
    finally:
        event.remove(store.engine, "before_cursor_execute", capture)
    return {
        name: {"call": _p50_p95(walls[name]), "server": _p50_p95(servers[name]), "plan": scans[name]}
        for name in calls
    }


def _p50_p95(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def _scans(lines: list[str]) -> str:
    """The scans of a plan, e.g. ``Index Scan Backward using ix_runs_created_at_id``."""
    scans = []
    for line in lines:
        text = line.strip().lstrip("->").strip()
        if "Scan" in text:
            scans.append(text.split("  (")[0])
    return "; ".join(dict.fromkeys(scans)) or lines[0]


def run(url: str, *, runs: int, rounds: int) -> dict[str, Any]:
    from agentloop.orchestration.store import open_store

    store, _ = open_store(url)
    try:
        data = fill(url, runs=runs)
        with store.engine.begin() as connection:
            for name in NEW_INDEXES:
                connection.exec_driver_sql(f"DROP INDEX {name}")
            connection.exec_driver_sql("CREATE INDEX ix_runs_created_at ON runs (created_at)")
            connection.exec_driver_sql("ANALYZE runs")
        before = measure(store, data, rounds=rounds)
        with store.engine.begin() as connection:
            connection.exec_driver_sql("DROP INDEX ix_runs_created_at")
            for ddl in NEW_INDEXES.values():
                connection.exec_driver_sql(ddl)
            connection.exec_driver_sql("ANALYZE runs")
        after = measure(store, data, rounds=rounds)
    finally:
        store.engine.dispose()
    return {"data": data, "before": before, "after": after}


def cli(options: BenchOptions) -> bool | None:
    from tests.services.postgres import PostgresUnavailableError, private_postgres_database

    runs = options.size or (10_000 if options.quick else 100_000)
    rounds = options.rounds or (50 if options.quick else 200)
    try:
        with private_postgres_database() as url:
            report = run(url, runs=runs, rounds=rounds)
    except PostgresUnavailableError as unavailable:
        print(f"store_volume: NOT RUN ({unavailable})")
        return None
    data = report["data"]
    print(
        f"store_volume: PostgreSQL, {runs:,} runs (+100 batch parents), {data['events']:,} events, "
        f"filled by COPY in {data['fill_seconds']:.1f} s; {rounds} calls per query; milliseconds, p50/p95"
    )
    print("  call = the store call as the API makes it (Python + driver + server); server = the")
    print("  statement's execution time on the server (EXPLAIN ANALYZE, TIMING OFF)")
    header = f"  {'query':<28} {'0007 call':>13} {'0007 server':>13} {'head call':>13} {'head server':>13}"
    print(header)
    server_met = call_met = True
    for name, after in report["after"].items():
        before = report["before"][name]
        if not name.startswith("floor"):
            server_met = server_met and after["server"][1] < TARGET_MS
            call_met = call_met and after["call"][1] < TARGET_MS
        cells = [_pair(before["call"]), _pair(before["server"]), _pair(after["call"]), _pair(after["server"])]
        print(f"  {name:<28} " + " ".join(f"{cell:>13}" for cell in cells))
    print("  plans (EXPLAIN ANALYZE), 0007's indexes -> head's:")
    for name, after in report["after"].items():
        before_plan = report["before"][name]["plan"]
        change = after["plan"] if after["plan"] == before_plan else f"{before_plan} -> {after['plan']}"
        print(f"    {name:<28} {change}")
    for what, met in (("statement on the server", server_met), ("store call", call_met)):
        verdict = "met" if met else "MISSED"
        print(f"  target: every query's {what} p95 under {TARGET_MS:.0f} ms with head's indexes: {verdict}")
    print("  (a store call's time beyond the server's is this process decoding rows and the machine's load:")
    print("  compare it with the floor's, a SELECT 1 round trip measured in the same run)")
    return server_met and call_met


def _pair(values: tuple[float, float]) -> str:
    return f"{values[0]:.2f}/{values[1]:.2f}"

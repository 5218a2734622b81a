"""``python -m bench.store_calls [--calls N] [--rounds N]``: what one run-store call costs on PostgreSQL.

A loop task on a worker makes two store calls, a read at its start
(``loop_record``) and one write at its end (``finish_loop`` with the task's
progress events), plus its checkpoints; this times each of them against a
private PostgreSQL database (``tests.services.postgres``), one
thread, ``--calls`` calls each (1,000), and beside them their floor: the same
``SELECT`` as ``loop_record`` sent by psycopg alone on an autocommit connection,
measured in the same run; and a pipeline stage's one statement (``finish_loop_then_start``: a
stage's end, its event and the next stage's start), through the store and sent by psycopg alone.
Printed per call: CPU (this process only, not the server's) and wall microseconds, the median
of ``--rounds`` (5) rounds, and the ratio of each call's CPU to the floor's. A call's round
trips are counted by ``tests/store/test_store_round_trips.py``; this prints what they cost.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

EVENTS = [
    {"path": "p", "phase": "iteration", "status": "progress", "iteration": n, "data": {}} for n in range(5)
]


def _timed(call: Callable[[], Any], calls: int) -> tuple[float, float]:
    """CPU and wall microseconds per call of ``call``, over ``calls`` calls after one warm-up."""
    call()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(calls):
        call()
    return (time.process_time() - cpu) / calls * 1e6, (time.perf_counter() - wall) / calls * 1e6


def measure(url: str, *, calls: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Median CPU and wall microseconds per call of each store call, and of the floor."""
    import psycopg
    from psycopg.types.json import Jsonb
    from sqlalchemy.engine import make_url

    from agentloop.orchestration.store import open_store
    from agentloop.orchestration.store.checks import event_rows
    from agentloop.orchestration.store.dialects import PG_FINISH_LOOP_THEN_START, pg_event_batch
    from agentloop.orchestration.store.tables import utcnow

    store, _ = open_store(url)
    raw = psycopg.connect(make_url(url).set(drivername="postgresql").render_as_string(False), autocommit=True)
    run_id, paths = uuid.uuid4().hex, iter(range(10**9))
    store.create_run(run_id=run_id, runnable="bench", input={})
    floor_sql = "SELECT finished, result, iteration, state FROM checkpoints WHERE run_id = %s AND path = %s"
    # a pipeline stage's one statement (its end and the next stage's start), sent by psycopg alone:
    # what the store's call costs above the statement itself
    stage_sql = str(PG_FINISH_LOOP_THEN_START.compile(dialect=store.engine.dialect))

    def stage_alone() -> Any:
        done = next(paths)
        params = pg_event_batch(run_id, event_rows(run_id, EVENTS[:1]))
        params["events"] = Jsonb(params["events"])
        params.update(run_id=run_id, path=f"s/{done}", next_path=f"s/{done + 1}", updated_at=utcnow())
        params.update(result=Jsonb({"r": 1}), input_tokens=0, output_tokens=0)
        return raw.execute(stage_sql, params, prepare=True).fetchone()

    def stage_through_store() -> Any:
        done = next(paths)
        return store.finish_loop_then_start(run_id, f"s/{done}", {"r": 1}, f"s/{done + 1}", events=EVENTS[:1])

    sides: dict[str, Callable[[], Any]] = {
        "floor: psycopg SELECT": lambda: raw.execute(floor_sql, (run_id, "p")).fetchone(),
        "loop_record": lambda: store.loop_record(run_id, "p"),
        "get_run": lambda: store.get_run(run_id),
        "save_checkpoint": lambda: store.save_checkpoint(run_id, "p", 1, {"n": 1}),
        "finish_loop, 5 events": lambda: store.finish_loop(
            run_id, f"p/{next(paths)}", {"r": 1}, events=EVENTS
        ),
        "finish_loop, no events": lambda: store.finish_loop(run_id, f"p/{next(paths)}", {"r": 1}),
        "finish_loop_then_start": stage_through_store,
        "  the same, psycopg alone": stage_alone,
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    try:
        for _ in range(rounds):  # interleaved: every side once per round
            for name, call in sides.items():
                samples[name].append(_timed(call, calls))
    finally:
        raw.close()
        store.engine.dispose()
    return {
        name: (statistics.median(cpu for cpu, _ in runs), statistics.median(wall for _, wall in runs))
        for name, runs in samples.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.store_calls", description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    from tests.services.postgres import PostgresUnavailableError, private_postgres_database

    try:
        with private_postgres_database() as url:
            figures = measure(url, calls=args.calls, rounds=args.rounds)
    except PostgresUnavailableError as unavailable:
        print(f"store calls: NOT RUN ({unavailable})")
        return 0
    floor_cpu = figures["floor: psycopg SELECT"][0]
    print(f"run-store calls on PostgreSQL, one thread, {args.calls} calls, median of {args.rounds} rounds")
    print(f"  {'call':<24} {'CPU µs':>8} {'wall µs':>8} {'CPU / floor':>12}")
    for name, (cpu, wall) in figures.items():
        print(f"  {name:<24} {cpu:8.0f} {wall:8.0f} {cpu / floor_cpu:11.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m bench.batch_scale``: a batch of 10,000 inputs through ``agentloop.batch``.

Checks three things from one run, on a private Redis, a private PostgreSQL
database (``--store sqlite`` for a file) and one ``--pool threads`` worker:

* the batch completes (its summary record: every run succeeded);
* the worker's resident memory is flat: sampled each time another thousand runs
  have ended, the last sample is compared with the first (``--rss-growth``,
  default 1.25x, is the verdict's bound);
* Redis holds as many keys as before the batch once its results have expired
  (the worker runs with ``AGENTLOOP_RESULT_EXPIRES=--expires``, 20 s by default).

Each input is one ``bench.trivial`` loop (``bench/workflows_celery.py``). Only
127.0.0.1 is used; every wait is bounded (``--timeout``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import ExitStack
from typing import Any

from bench.celery_overhead.rig import ROOT, NotRunnable, _detach_result_consumer, run_store_url

RUNNABLE = "bench.trivial"


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024
    except (OSError, StopIteration):
        return 0.0


def _cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process ``pid`` has used so far (0 where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_for_batch(
    store: Any, batch_id: str, worker_pid: int, timeout: float
) -> tuple[dict[str, Any], list[float]]:
    """Poll the batch's runs until all have ended; sample the worker's RSS per thousand ended."""
    from agentloop.orchestration.celery_adapter.batches import summarize

    deadline, samples, next_mark = time.monotonic() + timeout, [], 1000
    while time.monotonic() < deadline:
        state = summarize(store, batch_id)
        while state["ended"] >= next_mark:
            samples.append(_rss_mib(worker_pid))
            next_mark += 1000
        if state["total"] and state["open"] == 0:
            return state, samples
        time.sleep(0.5)
    raise TimeoutError(f"the batch did not end within {timeout} s: {summarize(store, batch_id)}")


def _keys_back(redis: Any, start: int, timeout: float) -> tuple[int, float]:
    """Wait until Redis holds at most ``start`` keys (results expired); the count and the wait."""
    began = time.monotonic()
    count = redis.dbsize()
    while count > start and time.monotonic() - began < timeout:
        time.sleep(1.0)
        count = redis.dbsize()
    return count, time.monotonic() - began


def _commits(store: Any) -> int:
    """The transactions committed in the store's database so far (PostgreSQL; 0 elsewhere)."""
    from sqlalchemy import text

    with store.engine.connect() as connection:
        if connection.dialect.name != "postgresql":
            return 0
        connection.execute(text("SELECT pg_stat_clear_snapshot()"))
        query = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        return int(connection.execute(text(query)).scalar_one())


def _durable_writes(store: Any, batch_id: str) -> dict[str, Any]:
    """What the batch's runs wrote to the run store: their events and checkpoint rows, and the
    database's size."""
    from sqlalchemy import text

    with store.engine.connect() as connection:
        children = "SELECT id FROM runs WHERE parent_run_id = :batch"
        events = connection.execute(
            text(f"SELECT count(*) FROM run_events WHERE run_id IN ({children})"), {"batch": batch_id}
        ).scalar_one()
        checkpoints = connection.execute(
            text(f"SELECT count(*) FROM checkpoints WHERE run_id IN ({children})"), {"batch": batch_id}
        ).scalar_one()
        size = "?"
        if connection.dialect.name == "postgresql":
            size = connection.execute(
                text("SELECT pg_size_pretty(pg_database_size(current_database()))")
            ).scalar_one()
    return {"events": int(events), "checkpoints": int(checkpoints), "store": str(size)}


def run(args: argparse.Namespace) -> bool:
    """One batch of ``args.inputs``; prints the figures and returns the verdict."""
    import redis

    from agentloop import create_app, load_settings
    from agentloop.orchestration.store import open_store
    from agentloop.orchestration.wire import BATCH
    from tests.services.redis_server import ServiceUnavailable, private_redis_server
    from tests.services.worker import run_worker_process

    with ExitStack() as stack:
        try:
            server = stack.enter_context(private_redis_server())
        except ServiceUnavailable as unavailable:
            raise NotRunnable(unavailable.reason) from unavailable
        database_url = stack.enter_context(run_store_url(args.store))
        env = {
            "DATABASE_URL": database_url,
            "AGENTLOOP_BENCH_WORKER": "1",
            "PYTHONPATH": str(ROOT),
            "AGENTLOOP_RESULT_EXPIRES": str(args.expires),
        }
        worker = stack.enter_context(
            run_worker_process(
                broker_url=server.url,
                result_backend=server.url,
                imports=[args.imports],
                env=env,
                pool="threads",
                concurrency=args.concurrency,
                loglevel="WARNING",
                start_timeout=60.0,
            )
        )
        client_env = {"BROKER_URL": server.url, "RESULT_BACKEND": server.url, "DATABASE_URL": database_url}
        client_env["AGENTLOOP_RESULT_EXPIRES"] = str(args.expires)
        app = create_app(settings=load_settings(client_env))
        stack.callback(app.close)
        stack.callback(_detach_result_consumer, app)
        client = redis.Redis.from_url(server.url)
        stack.callback(client.close)
        store, _ = open_store(database_url, migrate=False)
        stack.callback(store.engine.dispose)

        keys_before, rss_before = client.dbsize(), _rss_mib(worker.pid)
        commits_before = _commits(store)
        cpu_before = _cpu_seconds(worker.pid)
        began = time.perf_counter()
        started = app.send_task(
            BATCH,
            kwargs={
                "runnable": args.runnable,
                "inputs": [None] * args.inputs,
                "poll_seconds": 1.0,
                **({"chunk_size": args.chunk_size} if args.chunk_size else {}),
            },
        ).get(timeout=args.timeout)
        started_id = started["batch_id"]
        state, samples = _wait_for_batch(store, started_id, worker.pid, args.timeout)
        seconds = time.perf_counter() - began
        worker_cpu = _cpu_seconds(worker.pid) - cpu_before
        load = os.getloadavg()
        writes = _durable_writes(store, started_id)
        commits = _commits(store) - commits_before
        keys_peak = client.dbsize()
        keys_after, waited = _keys_back(client, keys_before, args.expires * 3 + 30)

    growth = samples[-1] / samples[0] if samples and samples[0] else float("nan")
    completed = state["succeeded"] == args.inputs and state["open"] == 0
    flat = growth <= args.rss_growth
    keys_ok = keys_after <= keys_before
    print(
        f"batch of {args.inputs} x {args.runnable}, --pool threads -c {args.concurrency}, {args.store} store"
    )
    print(
        f"  completed: {completed} ({state['succeeded']} succeeded, {state['failed']} failed)",
        f"in {seconds:.1f} s",
    )
    ended = state["succeeded"] + state["failed"] + state.get("degraded", 0)
    print(
        f"  durable runs/s: {ended / seconds:.0f} ({ended} runs recorded and ended in {seconds:.1f} s, "
        f"the batch's start and its last summary poll included); events written: {writes['events']} "
        f"({writes['events'] / seconds:.0f}/s); checkpoint rows left: {writes['checkpoints']}; "
        f"store: {writes['store']}; database commits: {commits} ({commits / seconds:.0f}/s, "
        f"{commits / max(1, ended):.1f} a run)"
    )
    print(
        f"  worker CPU: {worker_cpu:.1f} s, {worker_cpu / max(1, ended) * 1000:.2f} ms a run "
        f"(the worker process, all its threads); load average at the end: "
        + ", ".join(f"{value:.1f}" for value in load)
    )
    if args.ideal:
        capacity = args.inputs * args.ideal / args.concurrency  # every thread busy waiting, no gap
        print(
            f"  wall / one run's ideal ({args.ideal:g} s): {seconds / args.ideal:.1f}x; "
            f"wall / the pool's capacity ({args.inputs} x {args.ideal:g} s / {args.concurrency} threads "
            f"= {capacity:.1f} s): {seconds / capacity:.2f}x"
        )
    print(
        f"  worker RSS: {rss_before:.0f} MiB idle; per thousand ended:",
        ", ".join(f"{sample:.0f}" for sample in samples),
        "MiB",
    )
    print(
        f"  RSS last/first thousand: {growth:.2f}x (bound {args.rss_growth}x): {'flat' if flat else 'GROWS'}"
    )
    print(
        f"  Redis keys: {keys_before} before, {keys_peak} at the end, {keys_after} after "
        f"{waited:.0f} s (result expiry {args.expires} s): {'back' if keys_ok else 'NOT back'}"
    )
    ok = completed and flat and keys_ok
    print("verdict:", "PASS" if ok else "FAIL")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_scale", description=__doc__)
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--runnable", default=RUNNABLE, help="the registered runnable of each input")
    parser.add_argument("--imports", default="bench.workflows_celery", help="the module registering it")
    parser.add_argument("--ideal", type=float, default=0.0, help="one run's latency ideal, seconds")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument(
        "--chunk-size", type=int, default=0, help="agentloop.batch's chunk_size (0: its default)"
    )
    parser.add_argument("--store", default="postgres", choices=("sqlite", "postgres"))
    parser.add_argument("--expires", type=int, default=20, help="result expiry of the worker, seconds")
    parser.add_argument("--rss-growth", type=float, default=1.25)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--check", action="store_true", help="exit 1 when the verdict is FAIL")
    args = parser.parse_args(argv)
    try:
        ok = run(args)
    except NotRunnable as missing:
        print(f"batch_scale: NOT RUN ({missing})")
        return 0
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())

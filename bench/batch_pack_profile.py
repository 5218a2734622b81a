"""``python -m bench.batch_pack_profile [--inputs 2000] [--chunk 100] [--profile]``: one process
runs a packed batch's chunks and packs (``agentloop.batch_chunk``, ``agentloop.batch_pack``,
applied here, no broker) over ``--inputs`` ``bench.trivial_awaiting`` runs against a private
PostgreSQL run store, and prints the SQL statements and the CPU of the chunks and of the packs per
run; ``--profile`` adds a cProfile of the packs. The heap is frozen first, as a worker freezes
it (``celery_adapter/heap.py``). What ``bench/README.md`` reports of a packed batch's CPU."""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_pack_profile", description=__doc__)
    parser.add_argument("--inputs", type=int, default=2000)
    parser.add_argument(
        "--chunk", type=int, default=100, help="inputs per chunk (agentloop.batch's chunk_size)"
    )
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    from celery import signals
    from sqlalchemy import event

    from agentloop.orchestration.celery_adapter.app import create_app
    from agentloop.orchestration.registry import RunnableRegistry
    from agentloop.orchestration.store import open_store
    from agentloop.orchestration.wire import BATCH_CHUNK, BATCH_PACK
    from bench.workflows_celery import TRIVIAL_AWAITING
    from tests.services.postgres import PostgresUnavailableError, private_postgres_database

    try:
        database = private_postgres_database()
        url = database.__enter__()
    except PostgresUnavailableError as error:
        print(f"batch_pack_profile: NOT RUN (no PostgreSQL: {error})")
        return 0
    try:
        store, _ = open_store(url)
        registry = RunnableRegistry.from_modules(["bench.workflows_celery"])
        overrides = {
            "broker_url": "memory://",
            "result_backend": "cache+memory://",
            "task_default_queue": "profile",
        }
        app = create_app(registry=registry, store=store, overrides=overrides)
        statements = [0]
        event.listen(
            store.engine, "before_cursor_execute", lambda *_: statements.__setitem__(0, statements[0] + 1)
        )
        packs: list[Any] = []

        def keep(headers: Any = None, body: Any = None, **_: Any) -> None:
            if (headers or {}).get("task") == BATCH_PACK:
                packs.append(body[0][0])

        signals.before_task_publish.connect(keep, weak=False)
        store.create_run(run_id="batch", runnable="batch:profile", input={"count": args.inputs})
        gc.collect()
        gc.freeze()
        chunk_cpu, chunk_statements = time.process_time(), statements[0]
        for offset in range(0, args.inputs, args.chunk):
            inputs = [None] * min(args.chunk, args.inputs - offset)
            app.tasks[BATCH_CHUNK].apply(args=("batch", TRIVIAL_AWAITING, inputs, offset, {}, None)).get()
        chunk_cpu, chunk_statements = time.process_time() - chunk_cpu, statements[0] - chunk_statements
        profile = cProfile.Profile() if args.profile else None
        began, cpu, pack_statements = time.perf_counter(), time.process_time(), statements[0]
        if profile is not None:
            profile.enable()
        ended = sum(app.tasks[BATCH_PACK].apply(args=(launches,)).get()["done"] for launches in packs)
        if profile is not None:
            profile.disable()
        cpu, wall, pack_statements = (
            time.process_time() - cpu,
            time.perf_counter() - began,
            statements[0] - pack_statements,
        )
        runs = args.inputs
        print(f"{runs} x {TRIVIAL_AWAITING} in {len(packs)} packs of {args.chunk}, PostgreSQL, one process")
        print(f"  ended: {ended}")
        print(
            f"  chunks: {chunk_statements / runs:.3f} statements a run, "
            f"{chunk_cpu / runs * 1000:.3f} ms CPU a run"
        )
        print(
            f"  packs:  {pack_statements / runs:.3f} statements a run "
            f"({pack_statements / len(packs):.0f} a pack), "
            f"{cpu / runs * 1000:.3f} ms CPU a run, {runs / wall:.0f} runs/s on one thread"
        )
        if profile is not None:
            pstats.Stats(profile).sort_stats("tottime").print_stats(40)
        app.close()
        store.engine.dispose()
    finally:
        database.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m bench.packing_profile [--branches 200] [--packs 15] [--profile]``: one process runs
``WorkflowEngine.start_pack`` over ``--branches`` ``--runnable`` branches (``bench.model.loop``;
``bench.model.plain_loop``: its plain-function twin, run in the pack's threads) against a private
PostgreSQL run store (``--store memory``: the engine's CPU alone), ``--packs`` times (no Celery),
and prints the wall time and the CPU per run; ``--profile`` adds a cProfile of it (``--sort
tottime`` for own time, ``--dump`` to keep it; sampling profilers: ``py-spy record -- python -m
bench.packing_profile``). What ``bench/README.md`` reports of a packed run's worker CPU."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import sys
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.packing_profile", description=__doc__)
    parser.add_argument("--branches", type=int, default=200)
    parser.add_argument("--packs", type=int, default=15)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--runnable", default="bench.model.loop", help="the branches' loop (bench.model.*)")
    parser.add_argument(
        "--store", choices=("postgres", "memory"), default="postgres", help="memory: the engine's CPU alone"
    )
    parser.add_argument("--sort", default="cumulative", help="the profile's order (tottime: own time)")
    parser.add_argument("--dump", default="", help="also write the profile's stats to this file")
    parser.add_argument(
        "--openai",
        action="store_true",
        help="each wait a call through OpenAIProcessor to a local OpenAI-protocol server (a thread here)",
    )
    args = parser.parse_args(argv)
    from agentloop.orchestration.registry import RunnableRegistry
    from agentloop.orchestration.runtime.engine import WorkflowEngine
    from agentloop.orchestration.store import InMemoryRunStore, RunStore, open_store
    from agentloop.orchestration.wire import WorkflowNode
    from bench.model_bound.workflows import FAN
    from tests.services.postgres import PostgresUnavailableError, private_postgres_database

    stack = contextlib.ExitStack()
    if args.openai:  # the branches' standard context then holds an OpenAIProcessor (bench.model.loop)
        from bench.model_bound.run import model_server

        os.environ["OPENAI_BASE_URL"] = stack.enter_context(model_server(0.2))
        os.environ["OPENAI_MAX_RETRIES"] = "0"
    database = private_postgres_database() if args.store == "postgres" else contextlib.nullcontext("")
    try:
        url = database.__enter__()
    except PostgresUnavailableError as error:
        print(f"packing_profile: NOT RUN (no PostgreSQL: {error})")
        return 0
    try:
        store: RunStore = open_store(url)[0] if url else InMemoryRunStore()
        registry = RunnableRegistry.from_modules(["bench.model_bound.workflows"])
        engine = WorkflowEngine(
            registry=registry,
            store=store,
            progress_interval=0.5,
            events_interval=1.0,
            checkpoint_interval=0.5,
        )
        loop = asyncio.new_event_loop()

        def one_pack(index: int) -> None:
            run_id = f"pack-{index}"
            store.create_run(run_id=run_id, runnable=FAN, input=args.branches)
            node = WorkflowNode(run_id=run_id, runnable=FAN, fresh=True)
            nodes = [
                WorkflowEngine.branch_node(node, args.runnable, str(k), args.branches, True)
                for k in range(args.branches)
            ]
            loop.run_until_complete(engine.start_pack(nodes, [None] * args.branches))

        one_pack(-1)  # warm-up
        profile = cProfile.Profile() if args.profile else None
        began, cpu = time.perf_counter(), time.process_time()
        if profile is not None:
            profile.enable()
        for index in range(args.packs):
            one_pack(index)
        if profile is not None:
            profile.disable()
        runs = args.packs * args.branches
        wall, used = time.perf_counter() - began, time.process_time() - cpu
        print(
            f"{args.packs} packs of {args.branches}: {wall / args.packs:.2f} s a pack (ideal 0.6 s), "
            f"{used * 1000 / runs:.3f} ms of this process's CPU per run"
        )
        if profile is not None:
            if args.dump:
                profile.dump_stats(args.dump)
            pstats.Stats(profile).sort_stats(args.sort).print_stats(30)
            print_split(pstats.Stats(profile))
        loop.close()
        database_engine = getattr(store, "engine", None)
        if database_engine is not None:
            database_engine.dispose()
    finally:
        database.__exit__(None, None, None)
        stack.close()
    return 0


#: The parts a profile's own time is split into, by the file a function is in (first match).
PARTS = (
    ("the OpenAI SDK (with pydantic)", ("/openai/", "/pydantic", "typing_extensions")),
    (
        "HTTP (httpx, httpcore, h11, anyio, ssl, socket)",
        ("/httpx", "/httpcore", "/h11/", "/anyio/", "/sniffio/", "_ssl", "socket"),
    ),
    ("ours (agentloop)", ("/agentloop/",)),
    ("the run store's drivers (SQLAlchemy, psycopg)", ("/sqlalchemy/", "/psycopg/")),
    ("asyncio", ("/asyncio/",)),
    ("json", ("/json/",)),
)


def _part(file: str, function: str) -> str | None:
    """The part (:data:`PARTS`) a function is in, its package for another one, ``None`` for the
    standard library and builtins (whose time goes to their callers)."""
    where = function if file == "~" else file  # a builtin: "<method 'recv' of '_socket.socket' ...>"
    name = next((part for part, marks in PARTS if any(mark in where for mark in marks)), None)
    if name is None and "site-packages/" in file:
        name = file.split("site-packages/", 1)[1].split("/", 1)[0]
    return name


def print_split(stats: pstats.Stats) -> None:
    """The profile's own time (the event loop's waits left out) by part (:data:`PARTS`): the
    standard library's and the builtins' own time goes to the parts that called them, in
    proportion to the time each caller spent in them (a socket's ``send`` under httpx is HTTP)."""
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    parts: dict[str, float] = {}

    def assign(key: Any, seconds: float, depth: int = 0) -> None:
        name = _part(key[0], key[2])
        callers = table[key][4]
        if name is None and depth < 16 and callers:
            total = sum(entry[3] for entry in callers.values())
            if total > 0:
                for caller, entry in callers.items():
                    if caller in table:
                        assign(caller, seconds * entry[3] / total, depth + 1)
                return
        name = name or "the standard library (no caller in ours or a package)"
        parts[name] = parts.get(name, 0.0) + seconds

    for key, (_, _, own, _, _) in table.items():
        if "poll" not in key[2] and "select" not in key[2]:  # the event loop waiting: not CPU
            assign(key, own)
    total = sum(parts.values()) or 1.0
    print("own time by part, the standard library's given to its callers (cProfile, this thread):")
    for name, seconds in sorted(parts.items(), key=lambda item: -item[1])[:10]:
        print(f"  {100 * seconds / total:5.1f}%  {name}")


if __name__ == "__main__":
    sys.exit(main())

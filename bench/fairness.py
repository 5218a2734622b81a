"""``python -m bench.fairness``: concurrency keys on a real worker: fair shares between tenants.

On a private Redis (broker and results), a private PostgreSQL database (``--store sqlite`` for a
file), a local OpenAI-protocol model server (each call answered after ``--latency`` s; it counts
each key's calls in flight) and one ``--pool threads`` worker, every run is ``bench.fair.call``:
one model call, keyed by its input, at most ``--limit`` (50) runs of a key in flight.

1. **Baseline**: ``--alone`` runs of key B one after the other: their median time, send to result.
2. **Interactive beside a batch**: key A's ``agentloop.batch`` of ``--inputs`` (5,000) runs; once
   its first runs have ended, key B's ``--interactive`` (50) runs, one every ``--spacing`` s.
   Printed: B's start (send to recorded start, from the run store's clock) at p50/p95 against the
   1 s target, B's end at p50/p95 as a ratio to the baseline (target at most 2x), and the most of
   A's calls the model server saw in flight at once (target: at most ``--limit``).
3. **Two equal keys**: keys C and D send a batch of ``--equal`` (2,000) each, C's first; the model
   server's calls of each key while both still had runs to do: their ratio (target within 10%).

Ratios are against the baseline of the same run. Only 127.0.0.1 is used; every wait is bounded
(``--timeout``). ``--quick``: 500 inputs, 20 interactive runs, 300 of each equal key.

``--defaults`` (issue 36's target: nothing set): the worker as ``celery worker`` starts it with no
capacity setting (the prefork pool, a process per core), runs of ``bench.fair.free`` (no
concurrency rule: no key limit, the batch packed as the packing rule decides), 10,000 inputs (500
with ``--quick``); measurement 3 is left out (without keys there are no shares to compare).

``--trace FILE``: every process of the worker appends a line per task step to ``FILE``
(``bench/fairness_workflows.py``); printed: B's launches from send to taken by the worker and
from there to a pool process, what held each pool process when B was sent, batch messages taken
while B waited in the broker, and how long the batch packs ran.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from bench.celery_overhead.rig import ROOT, NotRunnable, _detach_result_consumer, run_store_url
from bench.fairness_workflows import FREE, RUNNABLE

START_TARGET, END_RATIO_TARGET, SHARE_TARGET = 1.0, 2.0, 0.10
_KEY = re.compile(r"key=([A-Za-z0-9_-]+)")


class CountingModel:
    """The model server's responder: each call waits ``latency`` s; calls counted per key."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.lock = threading.Lock()
        self.inside: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.calls: list[tuple[float, str]] = []

    def __call__(self, body: Any) -> Any:
        from agentloop.orchestration.testing.servers.openai_replies import reply_text

        found = _KEY.search(json.dumps(body))
        key = found.group(1) if found else "?"
        with self.lock:
            self.inside[key] = self.inside.get(key, 0) + 1
            self.most[key] = max(self.most.get(key, 0), self.inside[key])
            self.calls.append((time.time(), key))
        try:
            time.sleep(self.latency)
        finally:
            with self.lock:
                self.inside[key] -= 1
        return reply_text("ok")


def _until(check: Any, timeout: float, what: str, every: float = 0.05) -> None:
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"{what} did not happen within {timeout} s")
        time.sleep(every)


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@contextmanager
def _rig(args: argparse.Namespace, model: CountingModel) -> Iterator[tuple[Any, Any]]:
    from agentloop import create_app, load_settings
    from agentloop.orchestration.store import open_store
    from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer
    from tests.services.redis_server import ServiceUnavailable, private_redis_server
    from tests.services.worker import run_worker_process

    with ExitStack() as stack:
        try:
            server = stack.enter_context(private_redis_server())
        except ServiceUnavailable as unavailable:
            raise NotRunnable(unavailable.reason) from unavailable
        database_url = stack.enter_context(run_store_url(args.store))
        model_url = stack.enter_context(OpenAICompatibleServer(responder=model)).base_url
        env = {
            "DATABASE_URL": database_url,
            "PYTHONPATH": str(ROOT),
            "OPENAI_BASE_URL": model_url,
            "OPENAI_API_KEY": "sk-bench",
            "OPENAI_MAX_RETRIES": "0",
            "AGENTLOOP_BENCH_KEY_LIMIT": str(args.limit),
            **({"AGENTLOOP_BENCH_TRACE": args.trace} if args.trace else {}),
        }
        stack.enter_context(
            run_worker_process(
                broker_url=server.url,
                result_backend=server.url,
                imports=["bench.fairness_workflows"],
                env=env,
                pool=args.pool,
                concurrency=args.concurrency,
                loglevel="WARNING",
                start_timeout=60.0,
            )
        )
        client_env = {"BROKER_URL": server.url, "RESULT_BACKEND": server.url, "DATABASE_URL": database_url}
        app = create_app(settings=load_settings(client_env))
        stack.callback(app.close)
        stack.callback(_detach_result_consumer, app)
        store, _ = open_store(database_url, migrate=False)
        stack.callback(store.engine.dispose)
        yield app, store


def _launch(app: Any, runnable: str, key: str) -> tuple[str, float]:
    from agentloop.orchestration.wire import LAUNCH

    sent = time.time()
    result = app.send_task(LAUNCH, kwargs={"runnable": runnable, "input": {"key": key}})
    return str(result.id), sent


def _batch(app: Any, runnable: str, key: str, count: int, timeout: float) -> str:
    from agentloop.orchestration.wire import BATCH

    kwargs = {
        "runnable": runnable,
        "inputs": [{"key": key}] * count,
        "poll_seconds": 1.0,
        "key": f"fair-{key}",
    }
    return str(app.send_task(BATCH, kwargs=kwargs).get(timeout=timeout)["batch_id"])


def _ended(store: Any, run_id: str) -> bool:
    record = store.get_run(run_id)
    return record is not None and record.is_finished


def _equal_keys(app: Any, store: Any, model: CountingModel, args: argparse.Namespace) -> tuple[int, int]:
    """Keys C and D send a batch of ``--equal`` each, C's first: the model server's calls of each
    while both still had runs to do."""
    from agentloop.orchestration.celery_adapter.batches import summarize

    began = time.time()
    batch_c = _batch(app, args.runnable, "C", args.equal, args.timeout)
    batch_d = _batch(app, args.runnable, "D", args.equal, args.timeout)

    def first_done() -> bool:
        return bool(summarize(store, batch_c)["open"] == 0 or summarize(store, batch_d)["open"] == 0)

    _until(first_done, args.timeout, "one equal key's batch", every=0.2)
    window_end = time.time()
    with model.lock:
        both = [key for at, key in model.calls if began <= at <= window_end]
    _until(
        lambda: summarize(store, batch_c)["open"] == 0 and summarize(store, batch_d)["open"] == 0,
        args.timeout,
        "both equal keys' batches",
        every=0.5,
    )
    return both.count("C"), both.count("D")


def run(args: argparse.Namespace) -> bool:
    """The three measurements; prints the figures, returns the verdict."""
    from agentloop.orchestration.celery_adapter.batches import summarize

    model = CountingModel(args.latency)
    with _rig(args, model) as (app, store):
        # 1. baseline: B's runs alone, one at a time
        alone = []
        for _ in range(args.alone):
            run_id, sent = _launch(app, args.runnable, "B")
            _until(lambda r=run_id: _ended(store, r), args.timeout, "a baseline run's end", every=0.005)
            record = store.get_run(run_id)
            alone.append(record.finished_at.timestamp() - sent)
        baseline = statistics.median(alone)

        # 2. A's batch, B's interactive runs spaced over it
        a_sent = time.time()
        batch_a = _batch(app, args.runnable, "A", args.inputs, args.timeout)
        _until(lambda: summarize(store, batch_a)["ended"] >= 50, args.timeout, "A's first runs")
        interactive = []
        for _ in range(args.interactive):
            interactive.append(_launch(app, args.runnable, "B"))
            time.sleep(args.spacing)
        _until(lambda: all(_ended(store, run_id) for run_id, _ in interactive), args.timeout, "B's runs")
        a_open_when_b_done = summarize(store, batch_a)["open"]
        starts, ends, claimed, running = [], [], [], []
        for run_id, sent in interactive:
            record = store.get_run(run_id)
            starts.append(record.started_at.timestamp() - sent)
            ends.append(record.finished_at.timestamp() - sent)
            claimed.append(record.created_at.timestamp() - sent)
            running.append((record.finished_at - record.started_at).total_seconds())
        _until(lambda: summarize(store, batch_a)["open"] == 0, args.timeout, "A's batch", every=0.1)
        a_seconds = time.time() - a_sent
        most_a = model.most.get("A", 0)

        # 3. two equal keys
        c_calls = d_calls = 0
        if args.equal:
            c_calls, d_calls = _equal_keys(app, store, model, args)

    start_p50, start_p95 = _p(starts, 0.5), _p(starts, 0.95)
    end_ratio_p50, end_ratio_p95 = _p(ends, 0.5) / baseline, _p(ends, 0.95) / baseline
    share = min(c_calls, d_calls) / max(1, max(c_calls, d_calls))
    checks = {
        "B starts within 1 s at p95": start_p95 <= START_TARGET,
        "B ends within 2x alone at p95": end_ratio_p95 <= END_RATIO_TARGET,
    }
    if not args.defaults:
        checks[f"A never above {args.limit} in flight"] = most_a <= args.limit
    if args.equal:
        checks["equal keys within 10%"] = share >= 1 - SHARE_TARGET
    limit = "no key rule" if args.defaults else f"per-key limit {args.limit}"
    print(
        f"fairness: {args.runnable}, --pool {args.pool} -c {args.concurrency}, {limit}, model latency"
        f" {args.latency} s, store {args.store}"
    )
    print(f"  baseline: B alone, median {baseline:.3f} s (of {args.alone} runs)")
    print(
        f"  A's batch of {args.inputs} with B's {args.interactive} runs every {args.spacing} s:"
        f" B started after p50 {start_p50:.3f} s, p95 {start_p95:.3f} s (target {START_TARGET} s);"
        f" ended after p50 {end_ratio_p50:.2f}x, p95 {end_ratio_p95:.2f}x alone (target {END_RATIO_TARGET}x);"
        f" A's runs still open when B's ended: {a_open_when_b_done}, all of A's ended after {a_seconds:.1f} s"
    )
    waiting = [start - claim for start, claim in zip(starts, claimed, strict=True)]
    for q in (0.5, 0.95):
        print(
            f"  where B's time went (p{round(q * 100)} of each): sent to recorded {_p(claimed, q):.3f} s,"
            f" recorded to started {_p(waiting, q):.3f} s, started to ended {_p(running, q):.3f} s"
            f" (alone: {baseline:.3f} s in all)"
        )
    most_b = model.most.get("B", 0)
    print(f"  most calls in flight at the model server: A {most_a} ({limit}), B {most_b}")
    if args.equal:
        print(
            f"  two keys of {args.equal}: while both had work, C made {c_calls} calls and D {d_calls}"
            f" (share ratio {share:.3f}, target >= {1 - SHARE_TARGET:.2f})"
        )
    if args.trace:
        _print_trace(args.trace, interactive)
    for what, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'}: {what}")
    verdict = all(checks.values())
    print("verdict:", "PASS" if verdict else "FAIL")
    return verdict


def _print_trace(path: str, interactive: list[tuple[str, float]]) -> None:
    """``--trace``: B's launch in the worker (broker to the worker's main process, main process to
    a pool process) and what held every pool process when B's message arrived."""
    steps: dict[str, dict[str, Any]] = {}
    with open(path) as lines:
        for line in lines:
            entry = json.loads(line)
            steps.setdefault(entry["id"], {"name": entry["name"]})[entry["step"]] = entry
    fetched, dispatched, held_by, overtaken = [], [], [], 0
    for run_id, sent in interactive:
        own = steps.get(run_id, {})
        if "received" not in own or "start" not in own:
            continue
        received, started = own["received"]["at"], own["start"]["at"]
        fetched.append(received - sent)
        dispatched.append(started - received)
        busy = [
            task["name"]
            for task in steps.values()
            if "start" in task and task["start"]["at"] <= sent and task.get("end", {}).get("at", 1e18) > sent
        ]
        held_by.append(",".join(sorted(busy)) or "-")
        # taken by the worker while B's launch waited in the broker: priority not honoured
        overtaken += sum(
            1
            for task in steps.values()
            if task["name"] != "agentloop.launch" and sent < task.get("received", {}).get("at", 0) < received
        )
    for q in (0.5, 0.95):
        print(
            f"  trace (p{round(q * 100)}): B's launch sent to taken by the worker {_p(fetched, q):.3f} s,"
            f" taken to running in a pool process {_p(dispatched, q):.3f} s"
        )
    counts: dict[str, int] = {}
    for held in held_by:
        counts[held] = counts.get(held, 0) + 1
    print(f"  trace: the pool's tasks when B's launch was sent (of {len(held_by)}): {counts}")
    print(f"  trace: batch messages the worker took while a launch of B waited in the broker: {overtaken}")
    packs = [
        task["end"]["at"] - task["start"]["at"]
        for task in steps.values()
        if task["name"] == "agentloop.batch_pack" and "start" in task and "end" in task
    ]
    if packs:
        print(
            f"  trace: {len(packs)} batch packs ran p50 {_p(packs, 0.5):.3f} s, p95 {_p(packs, 0.95):.3f} s"
            " each in their process"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__)
    parser.add_argument("--inputs", type=int, default=None, help="A's batch (5,000; 10,000 with --defaults)")
    parser.add_argument("--interactive", type=int, default=50)
    parser.add_argument("--spacing", type=float, default=0.5)
    parser.add_argument("--equal", type=int, default=2000)
    parser.add_argument("--alone", type=int, default=5)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=120)
    parser.add_argument("--store", default="postgres", choices=("sqlite", "postgres"))
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--quick", action="store_true", help="500 inputs, 20 interactive, 300 each")
    parser.add_argument(
        "--trace", default=None, help="a file: where each task's time went in the worker (fairness_workflows)"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when the verdict is FAIL")
    parser.add_argument(
        "--defaults",
        action="store_true",
        help="nothing set: prefork, a process per core, no key rule, 10,000 inputs, no equal keys",
    )
    args = parser.parse_args(argv)
    given = args.inputs
    args.pool, args.runnable, args.inputs = "threads", RUNNABLE, 5000
    if args.defaults:
        # what ``celery -A agentloop worker`` is with no capacity setting: prefork, one per core
        args.pool, args.runnable, args.concurrency = "prefork", FREE, os.cpu_count() or 1
        args.inputs, args.equal = 10_000, 0
    if args.quick:
        args.inputs, args.interactive = 500, 20
        args.equal = 0 if args.defaults else 300
    args.inputs = given if given is not None else args.inputs
    try:
        ok = run(args)
    except NotRunnable as missing:
        print(f"fairness: NOT RUN ({missing})")
        return 0
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m bench.packing``: packed branches against a bare chord and the inline runner (issue 24).

One command, one run, every figure side by side (``bench/README.md`` says more):

1. ``--runs`` model-bound runs (3 waits of 200 ms) as one composite on one ``--pool threads``
   worker: packed ``K`` to a task for each ``K`` of ``--packs``, one task per branch (the
   default), a bare Celery chord of as many tasks that wait the same way, and the inline runner
   in this process; each against the 0.6 s latency ideal. Beside each, the CPU per run over the
   whole host's share of the work: the worker process and its children, the private
   ``redis-server``, and the PostgreSQL backends serving the run store's database (read from
   ``/proc``; the inline runner: this process).
2. The same runs through ``OpenAIProcessor`` against the local OpenAI-protocol server
   (200 ms a reply), packed with the best ``K`` of step 1, against a bare asyncio script with one
   ``AsyncOpenAI`` client making the same calls on the same server (a subprocess).
3. ``--batch`` model-bound inputs through ``agentloop.batch`` (``bench/batch_scale.py``): its wall
   time against the ideal, the worker's RSS per thousand ended, Redis keys before and after expiry.

Targets: packed <= 1.5x the ideal; <= 1 ms of CPU per run; OpenAI packed <= 1.0x the bare script;
the batch completes flat and clean. The machine's load (``/proc/loadavg``) is printed with them.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.celery_overhead.rig import ROOT, NotRunnable
from bench.model_bound.run import IDEAL, RESULT_TIMEOUT, Rig, bare_once, framework_once, rig
from bench.model_bound.workflows import CALLS, FAN, PACK_SIZES, packed_fan

TARGET_IDEAL = 1.5
#: Issue 36, 10,000 loops in flight on one host: the latency ideal (about the CPU floor on 2
#: cores) and the workers' RSS, summed.
IN_FLIGHT_RUNS = 10_000
TARGET_IN_FLIGHT_IDEAL = 5.0
TARGET_IN_FLIGHT_RSS_MIB = 1536
TARGET_CPU_MS = 1.0
#: Issue 36: the worker's CPU per run, nothing set (the inline runner is 0.30 ms with no store).
TARGET_WORKER_CPU_MS = 0.4
#: Issue 36: the OpenAI path no slower than a bare asyncio script with one client (issue 24: 1.2x).
TARGET_OPENAI = 1.0
#: The most runs the OpenAI step sends at once: the local OpenAI-protocol server (a
#: ``ThreadingHTTPServer`` answering HTTP/1.0, a connection per call) drops connections under
#: 1,000 runs' calls at once, the bare script's and the framework's alike (``ReadError``,
#: ``APIConnectionError``); a larger ``--runs`` is capped to this for that step.
OPENAI_MAX_RUNS = 200
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found.update(int(child) for child in task.read_text().split())
        except OSError:
            continue
    return found


def _tree(pid: int) -> set[int]:
    """``pid`` and its descendants."""
    seen, todo = set(), [pid]
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(_children(current))
    return seen


class HostCpu:
    """The CPU seconds the processes doing a run's work have used: the worker's tree, the private
    Redis, and the PostgreSQL backends connected to the run store's database."""

    def __init__(self, r: Rig) -> None:
        self.rig = r
        self._pg: Any = None
        if r.database_url.startswith("postgresql"):
            from sqlalchemy import create_engine

            self._pg = create_engine(r.database_url, pool_size=1).connect()
        #: Which process a pid is: ``worker``, ``redis`` or ``postgres``.
        self.kinds: dict[int, str] = {}

    def _pids(self) -> set[int]:
        pids: set[int] = set()
        for pid in self.rig.worker_pids:
            pids |= _tree(pid)
        self.kinds.update(dict.fromkeys(pids, "worker"))
        if self.rig.redis_pid:
            pids.add(self.rig.redis_pid)
            self.kinds[self.rig.redis_pid] = "redis"
        if self._pg is not None:
            from sqlalchemy import text

            rows = self._pg.execute(
                text(
                    "SELECT pid FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
            self._pg.commit()
            backends = {int(pid) for (pid,) in rows}
            self.kinds.update(dict.fromkeys(backends, "postgres"))
            pids |= backends
        return pids

    def sample(self) -> dict[int, float]:
        """CPU seconds so far per process."""
        return {pid: cpu for pid in self._pids() if (cpu := _cpu_seconds(pid)) is not None}

    @staticmethod
    def used(before: dict[int, float], after: dict[int, float]) -> float:
        """CPU seconds between two samples (a process born between them counts from 0)."""
        return sum(max(0.0, cpu - before.get(pid, 0.0)) for pid, cpu in after.items())

    def split(self, before: dict[int, float], after: dict[int, float]) -> dict[str, float]:
        """:meth:`used` per kind of process."""
        parts: dict[str, float] = {}
        for pid, cpu in after.items():
            kind = self.kinds.get(pid, "other")
            parts[kind] = parts.get(kind, 0.0) + max(0.0, cpu - before.get(pid, 0.0))
        return parts

    def per_worker(self, before: dict[int, float], after: dict[int, float]) -> list[float]:
        """:meth:`used` per worker process (with its children), in :attr:`Rig.worker_pids`' order:
        next to the wall time, whether a worker's GIL was the bound (its CPU near the wall time)."""
        used = []
        for root in self.rig.worker_pids:
            tree = _tree(root)
            used.append(
                sum(max(0.0, cpu - before.get(pid, 0.0)) for pid, cpu in after.items() if pid in tree)
            )
        return used

    def close(self) -> None:
        if self._pg is not None:
            self._pg.close()


@dataclass
class Side:
    name: str
    once: Callable[[], float]
    #: Measure the CPU over the host's processes (else this process's, for the inline runner).
    host: bool = True
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    #: Per round, the CPU ms per run of each kind of process (worker, redis, postgres).
    parts: list[dict[str, float]] = field(default_factory=list)
    #: Per round, the CPU seconds of each worker process.
    workers: list[list[float]] = field(default_factory=list)


def inline_once(runs: int) -> float:
    """Seconds for the inline runner to run the same composite of ``runs`` loops in this process."""
    from agentloop import InlineAgentRunner
    from bench.model_bound.workflows import ModelFan

    runner = InlineAgentRunner.create(runnable=ModelFan, context=None)
    began = time.perf_counter()
    value = runner.request_sync(input=runs)
    seconds = time.perf_counter() - began
    if value != runs:
        raise AssertionError(f"the inline composite of {runs} returned {value!r}")
    return seconds


def _measure(r: Rig, sides: list[Side], rounds: int, runs: int) -> None:
    host = HostCpu(r)
    try:
        for side in sides:
            side.once()  # warm-up
        for index in range(rounds):
            for side in sides if index % 2 == 0 else list(reversed(sides)):
                before, own = host.sample(), time.process_time()
                side.seconds.append(side.once())
                after = host.sample()
                used = HostCpu.used(before, after) if side.host else time.process_time() - own
                side.cpu.append(used * 1000 / runs)
                parts = host.split(before, after).items()
                side.parts.append({kind: cpu * 1000 / runs for kind, cpu in parts})
                side.workers.append(host.per_worker(before, after) if side.host else [])
    finally:
        host.close()


def _load() -> str:
    with open("/proc/loadavg") as loadavg:
        return "load average " + " ".join(loadavg.read().split()[:3]) + f" on {os.cpu_count()} cores"


def latency_table(args: argparse.Namespace) -> tuple[bool, int]:
    """Step 1; returns whether the targets were met and the best pack size."""
    runs = args.runs
    with rig(store=args.store, concurrency=args.concurrency, openai=False, env={}, workers=args.workers) as r:
        sides = [Side("default (nothing set)", lambda: framework_once(r, runs, FAN))]
        sides += [
            Side(f"packed {k}", functools.partial(framework_once, r, runs, packed_fan(k)))
            for k in args.packs
            if k > 1
        ]
        if not args.skip_unpacked:
            sides.append(Side("one task per branch", lambda: framework_once(r, runs, packed_fan(1))))
        if not args.skip_bare:
            sides.append(Side("bare chord", lambda: bare_once(r, runs)))
        sides.append(Side("inline runner", lambda: inline_once(runs), host=False))
        _measure(r, sides, args.rounds, runs)
        rss, peak = r.worker_rss_mib(), r.worker_rss_mib("VmHWM")
    print(
        f"{runs} model-bound runs ({CALLS} x 200 ms, ideal {IDEAL:.1f} s) as one composite; {args.workers} "
        f"worker(s) --pool threads, {args.concurrency} threads in all, {args.store} store; "
        f"median of {args.rounds}; {_load()}"
    )
    print(f"{'side':<24}{'seconds':>9}{'/ ideal':>9}{'/ bare':>8}{'CPU ms/run':>12}  (host: worker+redis+pg)")
    bare_side = next((s for s in sides if s.name == "bare chord"), None)
    bare = statistics.median(bare_side.seconds) if bare_side is not None else math.nan
    for side in sides:
        seconds, cpu = statistics.median(side.seconds), statistics.median(side.cpu)
        where = "  (this process)"
        if side.host:
            split = {
                kind: statistics.median(p.get(kind, 0.0) for p in side.parts)
                for kind in ("worker", "redis", "postgres")
            }
            where = "  (" + ", ".join(f"{kind} {ms:.2f}" for kind, ms in split.items()) + ")"
        print(
            f"{side.name:<24}{seconds:>9.2f}{seconds / IDEAL:>8.2f}x"
            f"{'-' if math.isnan(bare) else f'{seconds / bare:.2f}x':>8}{cpu:>12.2f}{where}"
        )
    default = sides[0]
    seconds = statistics.median(default.seconds)
    worker_cpu = statistics.median(p.get("worker", 0.0) for p in default.parts)
    in_flight = runs >= IN_FLIGHT_RUNS
    if in_flight:  # 10,000 in flight: the latency and the memory targets (the CPU one holds at any size)
        ok = seconds / IDEAL <= TARGET_IN_FLIGHT_IDEAL and peak <= TARGET_IN_FLIGHT_RSS_MIB
        print(
            f"targets (issue 36, {runs} in flight, nothing set): <= {TARGET_IN_FLIGHT_IDEAL}x ideal, "
            f"workers' RSS <= {TARGET_IN_FLIGHT_RSS_MIB} MiB: {seconds / IDEAL:.2f}x, peak {peak:.0f} MiB "
            f"(now {rss:.0f}): {'PASS' if ok else 'FAIL'}; worker CPU {worker_cpu:.2f} ms/run "
            f"(<= {TARGET_WORKER_CPU_MS} ms is judged at 1,000)"
        )
    else:
        ok = seconds / IDEAL <= TARGET_IDEAL and worker_cpu <= TARGET_WORKER_CPU_MS
        print(
            f"targets (issue 36, nothing set): <= {TARGET_IDEAL}x ideal, <= {TARGET_WORKER_CPU_MS} ms worker "
            f"CPU/run: {seconds / IDEAL:.2f}x, {worker_cpu:.2f} ms: {'PASS' if ok else 'FAIL'}; "
            f"worker RSS {rss:.0f} MiB (peak {peak:.0f} MiB: the workers' VmHWM, summed)"
        )
    last = default.workers[-1] if default.workers else []
    if last:
        each = ", ".join(f"{cpu:.2f}" for cpu in last)
        print(
            f"the default side's last round: {default.seconds[-1]:.2f} s wall, its workers' CPU {each} s "
            "(a process's CPU near the wall time: its GIL, not waiting, bounds the latency)"
        )
    packed = [s for s in sides if s.name.startswith("packed")]
    if not packed:
        return ok, args.pack
    best = min(packed, key=lambda s: statistics.median(s.seconds))
    return ok, int(best.name.split()[1])


async def _bare_openai(base_url: str, runs: int) -> float:
    """A bare asyncio script: one ``AsyncOpenAI`` client, ``runs`` x :data:`CALLS` calls in sequence each."""
    from openai import AsyncOpenAI

    # the worker's processor's settings: OPENAI_TIMEOUT_SECONDS' default 60 s (connect included), no retry
    client = AsyncOpenAI(api_key="bench", base_url=base_url, timeout=60.0, max_retries=0)

    async def one() -> None:
        for _ in range(CALLS):
            reply = await client.chat.completions.create(
                model="bench", messages=[{"role": "user", "content": "ping"}]
            )
            if not reply.choices:
                raise AssertionError("no reply")

    try:
        began = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(runs)))
        return time.perf_counter() - began
    finally:
        await client.close()


def bare_openai_once(base_url: str, runs: int) -> float:
    """:func:`_bare_openai` in a process of its own (as a script would be); its seconds."""
    command = [sys.executable, "-m", "bench.packing", "--bare-openai", base_url, "--runs", str(runs)]
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, timeout=RESULT_TIMEOUT, check=True
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def openai_table(args: argparse.Namespace, pack: int) -> bool:
    """Step 2: packed through ``OpenAIProcessor`` against a bare asyncio script on the same server,
    with at most :data:`OPENAI_MAX_RUNS` runs; a failure of either side is reported as NOT RUN
    (with its reason), not as a traceback, and leaves the verdict to the other steps."""
    runs = min(args.runs, OPENAI_MAX_RUNS)
    if runs < args.runs:
        print(
            f"OpenAI step: {runs} runs, not {args.runs} (the local OpenAI-protocol server opens a "
            f"connection per call and drops them beyond about {OPENAI_MAX_RUNS} runs at once)"
        )
    try:
        return _openai_table(args, pack, runs)
    except NotRunnable:
        raise
    except Exception as error:  # the bare script failing, a client's error through Celery's result
        print(f"OpenAI step: NOT RUN ({_reason(error)})")
    return True


def _reason(error: BaseException) -> str:
    """One line saying why a side failed: the last line of a subprocess's error output, else the
    exception's type and message."""
    text = str(error)
    if isinstance(error, subprocess.CalledProcessError) and error.stderr:
        text = str(error.stderr)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return (
        last[:200]
        if isinstance(error, subprocess.CalledProcessError)
        else f"{type(error).__name__}: {last[:200]}"
    )


def _openai_table(args: argparse.Namespace, pack: int, runs: int) -> bool:
    with rig(store=args.store, concurrency=args.concurrency, openai=True, env={}, workers=args.workers) as r:
        sides = [
            Side(f"packed {pack}", lambda: framework_once(r, runs, packed_fan(pack))),
            Side("bare AsyncOpenAI", lambda: bare_openai_once(r.model_url, runs), host=False),
        ]
        _measure(r, sides, args.rounds, runs)
    packed, bare = (statistics.median(side.seconds) for side in sides)
    print(
        f"{runs} runs through OpenAIProcessor (local OpenAI-protocol server, 200 ms a reply); "
        f"median of {args.rounds}; {_load()}"
    )
    print(
        f"  packed {pack}: {packed:.2f} s ({packed / IDEAL:.2f}x ideal, "
        f"CPU {statistics.median(sides[0].cpu):.2f} ms/run)"
    )
    print(f"  bare asyncio script, one AsyncOpenAI client: {bare:.2f} s ({bare / IDEAL:.2f}x ideal)")
    ok = packed / bare <= TARGET_OPENAI
    print(f"target: packed / bare <= {TARGET_OPENAI}x: {packed / bare:.2f}x {'PASS' if ok else 'FAIL'}")
    return ok


def batch_table(args: argparse.Namespace) -> bool:
    """Step 3: ``--batch`` model-bound inputs through ``agentloop.batch``."""
    from bench import batch_scale

    argv = ["--inputs", str(args.batch), "--runnable", "bench.model.loop"]
    argv += ["--imports", "bench.model_bound.workflows", "--concurrency", str(args.concurrency)]
    argv += ["--store", args.store, "--ideal", str(IDEAL), "--check"]
    print(_load())
    return batch_scale.main(argv) == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.packing", description=__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--packs", default=",".join(map(str, PACK_SIZES)), help="pack sizes, of " + str(PACK_SIZES)
    )
    parser.add_argument("--concurrency", type=int, default=200, help="the workers' threads, in all")
    parser.add_argument(
        "--workers", type=int, default=2, help="worker processes sharing those threads (one a core: 2)"
    )
    parser.add_argument("--store", default="postgres", choices=("sqlite", "postgres"))
    parser.add_argument("--batch", type=int, default=10_000, help="inputs of the batch (0: no batch)")
    parser.add_argument("--skip-unpacked", action="store_true", help="no one-task-per-branch side")
    parser.add_argument("--skip-bare", action="store_true", help="no bare chord side (10,000 runs: slow)")
    parser.add_argument("--skip-openai", action="store_true")
    parser.add_argument(
        "--skip-latency", action="store_true", help="no step 1 (the OpenAI step packs --pack)"
    )
    parser.add_argument("--pack", type=int, default=100, help="the OpenAI step's pack size without step 1")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--bare-openai", metavar="BASE_URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bare_openai:
        print(json.dumps({"seconds": asyncio.run(_bare_openai(args.bare_openai, args.runs))}))
        return 0
    args.packs = [int(part) for part in args.packs.split(",") if part.strip()]
    unknown = set(args.packs) - set(PACK_SIZES)
    if unknown:
        parser.error(f"--packs: registered pack sizes are {PACK_SIZES}, not {sorted(unknown)}")
    try:
        ok, best = latency_table(args) if not args.skip_latency else (True, args.pack)
        if not args.skip_openai:
            print()
            ok = openai_table(args, best) and ok
        if args.batch:
            print()
            ok = batch_table(args) and ok
    except NotRunnable as missing:
        print(f"packing: NOT RUN ({missing})")
        return 0
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())

"""Timing one run of a side from send to result, with the CPU and the Redis commands it cost."""

from __future__ import annotations

import os
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.celery_overhead.rig import Rig, rig
from bench.celery_overhead.sides import Side, build_sides

#: The target (issue 3 set 1.3x, issue 11 tightened it): the framework at most this many times the bare
#: canvas's wall time.
TARGET_RATIO = 1.2
#: Per workload, where a later issue set its own: a pipeline's stages share one task (issue 36).
TARGET_RATIOS = {"composite": TARGET_RATIO, "pipeline": 0.5}
RESULT_TIMEOUT = 600.0
#: One-row autocommit ``INSERT``s a PostgreSQL run store's server is probed with after each round.
COMMIT_PROBES = 20


@dataclass
class SideResult:
    side: Side
    seconds: list[float] = field(default_factory=list)
    redis_commands: list[int] = field(default_factory=list)
    redis_bytes: list[int] = field(default_factory=list)
    redis_top: Counter[str] = field(default_factory=Counter)
    cpu: list[Cpu] = field(default_factory=list)

    @property
    def cpu_median(self) -> float:
        return statistics.median(c.total for c in self.cpu)

    @property
    def worker_cpu_median(self) -> float:
        return statistics.median(c.worker for c in self.cpu)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def _redis_calls(client: Any) -> Counter[str]:
    stats = client.info("commandstats")
    return Counter({key.removeprefix("cmdstat_"): int(value["calls"]) for key, value in stats.items()})


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (0 when it is gone or /proc is missing)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _group_cpu_seconds(group: int) -> float:
    """CPU seconds of every live process in process group ``group`` (the worker and its pool)."""
    total = 0.0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group:
            total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


@dataclass(frozen=True)
class Cpu:
    """CPU seconds one run cost: worker (main + pool processes), redis-server, this client."""

    worker: float
    redis: float
    client: float

    @property
    def total(self) -> float:
        return self.worker + self.redis + self.client


def _cpu_now(r: Rig) -> Cpu:
    return Cpu(
        worker=_group_cpu_seconds(r.worker.pid),
        redis=_cpu_seconds(r.redis_pid) if r.redis_pid else 0.0,
        client=time.process_time(),
    )


def run_once(r: Rig, side: Side) -> tuple[float, Counter[str], Cpu]:
    """Send the side's canvas, wait for its result: wall seconds, Redis commands, CPU it cost."""
    r.redis.config_resetstat()
    cpu_before = _cpu_now(r)
    started = time.perf_counter()
    sent = side.send(r)
    # Follow the final task by its id only: an AsyncResult that knows its parents (a chord's
    # group, a chain's earlier links) polls every parent's state on each wait interval, which
    # would load Redis and the CPUs with the client's own GETs.
    value = r.app.AsyncResult(sent.id).get(timeout=RESULT_TIMEOUT, interval=0.05)
    elapsed = time.perf_counter() - started
    cpu_after = _cpu_now(r)
    calls = _redis_calls(r.redis)
    calls -= Counter({"info": 1})
    net = r.redis.info("stats")
    calls["~bytes_in"] = int(net.get("total_net_input_bytes", 0))
    if value != side.expected:
        raise AssertionError(f"{side.key}: expected {side.expected!r}, got {value!r}")
    cpu = Cpu(
        worker=cpu_after.worker - cpu_before.worker,
        redis=cpu_after.redis - cpu_before.redis,
        client=cpu_after.client - cpu_before.client,
    )
    return elapsed, calls, cpu


@dataclass
class Report:
    width: int
    stages: int
    rounds: int
    store_kind: str
    results: dict[str, SideResult]
    profile_text: str = ""
    #: On PostgreSQL: seconds of one durable commit on the run store's server, probed after each
    #: round (:func:`durable_commit_seconds`); a stage recorded as it ends pays one.
    commit_seconds: list[float] = field(default_factory=list)

    def ratio(self, workload: str) -> float:
        framework = self.results["fw_composite" if workload == "composite" else "fw_pipeline"]
        bare = self.results["bare_chord" if workload == "composite" else "bare_chain"]
        return framework.median / bare.median

    def cpu_ratio(self, workload: str) -> float:
        framework = self.results["fw_composite" if workload == "composite" else "fw_pipeline"]
        bare = self.results["bare_chord" if workload == "composite" else "bare_chain"]
        return framework.cpu_median / bare.cpu_median if bare.cpu_median else float("nan")

    @staticmethod
    def target(workload: str) -> float:
        """The most framework/bare may be for ``workload`` (:data:`TARGET_RATIOS`)."""
        return TARGET_RATIOS.get(workload, TARGET_RATIO)

    @property
    def passed(self) -> bool:
        return all(self.ratio(workload) <= self.target(workload) for workload in ("composite", "pipeline"))


def durable_commit_seconds(database_url: str, count: int) -> list[float]:
    """Seconds of ``count`` one-row autocommit ``INSERT``s on a PostgreSQL run store's server
    (a table of their own, dropped after): one durable commit (a WAL flush) each."""
    import psycopg

    url = database_url.replace("postgresql+psycopg://", "postgresql://")
    seconds = []
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("CREATE TABLE bench_commit_probe (id bigserial PRIMARY KEY)")
        try:
            for _ in range(count):
                begun = time.perf_counter()
                connection.execute("INSERT INTO bench_commit_probe DEFAULT VALUES")
                seconds.append(time.perf_counter() - begun)
        finally:
            connection.execute("DROP TABLE bench_commit_probe")
    return seconds


def measure(
    *, width: int, stages: int, rounds: int, store_kind: str, worker_env: dict[str, str] | None = None
) -> Report:
    sides = build_sides(width, stages)
    results = {side.key: SideResult(side=side) for side in sides}
    pairs = [(sides[0], sides[1]), (sides[2], sides[3])]
    commits: list[float] = []
    with rig(store_kind=store_kind, stages=stages, worker_env=worker_env) as r:
        for side in sides:  # warm-up: pool processes import, connect, open the store
            run_once(r, side)
        for index in range(rounds):
            for first, second in pairs:
                order = (first, second) if index % 2 == 0 else (second, first)
                for side in order:
                    seconds, calls, cpu = run_once(r, side)
                    results[side.key].seconds.append(seconds)
                    results[side.key].cpu.append(cpu)
                    results[side.key].redis_bytes.append(calls.pop("~bytes_in", 0))
                    results[side.key].redis_commands.append(sum(calls.values()))
                    results[side.key].redis_top += calls
            if store_kind == "postgres":  # between rounds, outside the timed runs
                commits += durable_commit_seconds(r.database_url, COMMIT_PROBES)
    return Report(
        width=width,
        stages=stages,
        rounds=rounds,
        store_kind=store_kind,
        results=results,
        commit_seconds=commits,
    )

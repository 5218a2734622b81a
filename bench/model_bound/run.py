"""The ``model_bound`` benchmark's rig and timing: a threads worker, framework fan vs bare chord."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from bench.celery_overhead.rig import ROOT, NotRunnable, _detach_result_consumer, run_store_url
from bench.model_bound.workflows import BODY, CALLS, FAN, LATENCY, SLEEP
from bench.workflows_celery import ABLATE_ENV

#: The latency-bound ideal of one run: its calls, one after the other.
IDEAL = CALLS * LATENCY
RESULT_TIMEOUT = 600.0
WORKFLOWS_MODULE = "bench.model_bound.workflows"


@dataclass
class Rig:
    app: Any
    redis: Any
    worker_pids: tuple[int, ...] = ()
    #: The private ``redis-server``'s process (0: an external one), and the run store's URL.
    redis_pid: int = 0
    database_url: str = ""
    #: The local OpenAI-protocol server's base URL (``openai`` rigs only).
    model_url: str = ""

    def worker_rss_mib(self, field: str = "VmRSS") -> float:
        """The worker processes' resident memory (the threads pool runs every task in them), summed;
        ``field="VmHWM"``: each process's peak so far (their sum bounds the peak of the whole)."""
        total = 0.0
        for pid in self.worker_pids:
            try:
                with open(f"/proc/{pid}/status") as status:
                    line = next(line for line in status if line.startswith(f"{field}:"))
            except (OSError, StopIteration):
                continue
            total += int(line.split()[1]) / 1024
        return total

    def worker_cpu_seconds(self) -> float:
        """CPU seconds (user + system) the worker processes have used so far, all their threads."""
        total = 0.0
        for pid in self.worker_pids:
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total


@dataclass
class Figures:
    runs: int
    framework: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    #: The worker's CPU seconds per round, each side: less sensitive to a busy machine than the wall clock.
    framework_cpu: list[float] = field(default_factory=list)
    bare_cpu: list[float] = field(default_factory=list)

    @property
    def fw(self) -> float:
        return statistics.median(self.framework)

    @property
    def chord(self) -> float:
        return statistics.median(self.bare)

    def cpu_ms_per_run(self) -> tuple[float, float]:
        """The worker's median CPU milliseconds per run: framework, bare chord."""
        per_run = 1000 / self.runs
        return statistics.median(self.framework_cpu) * per_run, statistics.median(self.bare_cpu) * per_run


@contextmanager
def model_server(latency: float) -> Iterator[str]:
    from agentloop.orchestration.testing.servers.openai_replies import reply_delay, reply_text
    from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer

    with OpenAICompatibleServer(responder=lambda _body: reply_delay(latency, reply_text("ok"))) as server:
        yield server.base_url


@contextmanager
def rig(
    *, store: str, concurrency: int, openai: bool, env: dict[str, str], workers: int = 1
) -> Iterator[Rig]:
    """A private Redis, a run store, ``workers`` ``--pool threads`` workers sharing ``concurrency``
    threads, a client app (and a model server)."""
    import redis

    from agentloop import create_app, load_settings
    from tests.services.redis_server import ServiceUnavailable, private_redis_server
    from tests.services.worker import run_worker_process

    with ExitStack() as stack:
        try:
            server = stack.enter_context(private_redis_server())
        except ServiceUnavailable as unavailable:
            raise NotRunnable(unavailable.reason) from unavailable
        database_url = stack.enter_context(run_store_url(store))
        worker_env = {"DATABASE_URL": database_url, "AGENTLOOP_BENCH_WORKER": "1", "PYTHONPATH": str(ROOT)}
        model_url = ""
        if openai:
            worker_env["OPENAI_BASE_URL"] = model_url = stack.enter_context(model_server(LATENCY))
            worker_env["OPENAI_MAX_RETRIES"] = "0"
        worker_env.update(env)
        pids = []
        for _ in range(workers):
            worker = stack.enter_context(
                run_worker_process(
                    broker_url=server.url,
                    result_backend=server.url,
                    imports=[WORKFLOWS_MODULE, *(["bench.workflows_celery"] if ABLATE_ENV in env else [])],
                    env=worker_env,
                    pool="threads",
                    concurrency=max(1, concurrency // workers),
                    loglevel="WARNING",
                    start_timeout=60.0,
                )
            )
            pids.append(worker.pid)
        client_env = {"BROKER_URL": server.url, "RESULT_BACKEND": server.url, "DATABASE_URL": database_url}
        app = create_app(settings=load_settings(client_env))
        stack.callback(app.close)
        stack.callback(_detach_result_consumer, app)
        client = redis.Redis.from_url(server.url)
        stack.callback(client.close)
        process = getattr(server, "_process", None)
        yield Rig(
            app=app,
            redis=client,
            worker_pids=tuple(pids),
            redis_pid=process.pid if process is not None else 0,
            database_url=database_url,
            model_url=model_url,
        )


def framework_once(r: Rig, runs: int, runnable: str = FAN) -> float:
    """Seconds from sending one composite of ``runs`` loops (``runnable``) to its result."""
    from agentloop.orchestration.wire import LAUNCH

    began = time.perf_counter()
    result = r.app.send_task(LAUNCH, kwargs={"runnable": runnable, "input": runs})
    value = result.get(timeout=RESULT_TIMEOUT)
    seconds = time.perf_counter() - began
    if value != runs:
        raise AssertionError(f"the composite of {runs} returned {value!r}")
    result.forget()
    return seconds


def bare_once(r: Rig, runs: int) -> float:
    """Seconds from sending a bare chord of ``runs`` waiting tasks to its body's result."""
    from celery import chord

    began = time.perf_counter()
    result = chord([r.app.signature(SLEEP) for _ in range(runs)], r.app.signature(BODY)).apply_async()
    value = result.get(timeout=RESULT_TIMEOUT)
    seconds = time.perf_counter() - began
    if value != runs:
        raise AssertionError(f"the bare chord of {runs} returned {value!r}")
    return seconds


def measure(r: Rig, sizes: list[int], rounds: int) -> list[Figures]:
    """Per size: a warm-up of each side, then ``rounds`` interleaved rounds (order alternating)."""
    figures = []
    for runs in sizes:
        framework_once(r, runs)
        bare_once(r, runs)
        entry = Figures(runs=runs)
        for index in range(rounds):
            sides = [("fw", framework_once), ("bare", bare_once)]
            for name, once in sides if index % 2 == 0 else reversed(sides):
                cpu = r.worker_cpu_seconds()
                (entry.framework if name == "fw" else entry.bare).append(once(r, runs))
                cpu = r.worker_cpu_seconds() - cpu
                (entry.framework_cpu if name == "fw" else entry.bare_cpu).append(cpu)
        figures.append(entry)
    return figures

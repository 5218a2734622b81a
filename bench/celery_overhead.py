"""The framework on Celery vs bare Celery canvases: same broker, same worker, one run.

Two workloads, each timed from ``send`` to the result in the client:

``composite``
    framework: ``send_task("agentloop.launch", runnable="bench.fan", input=W)``,
    a composite of W trivial loops (one iteration each); the launch task
    replaces itself with ``chain(chord(W x agentloop.run, agentloop.merge),
    agentloop.finalize)``. bare: ``chord(W x bench.noop, bench.noop_body)``.
``pipeline``
    framework: ``agentloop.launch`` of ``bench.pipeline.S``, a pipeline of S
    trivial loops, replaced by ``chain(S x agentloop.stage,
    agentloop.pipeline_done, agentloop.finalize)``. bare: ``chain(S x bench.noop)``.

W = 1000 and S = 50 by default (``--quick``: 100 and 10; ``--size N``: W = N,
S = max(1, N // 20)). Everything runs against one private ``redis-server``
(broker and results), one real prefork worker process (``celery -A
orchestration worker``, concurrency 2, log level WARNING, settings from
``celeryconfig`` as deployed), and one run store shared by client and worker:
a SQLite file (default) or a private PostgreSQL database
(``AGENTLOOP_BENCH_STORE=postgres``). The worker imports
:mod:`bench.workflows_celery` through ``AGENTLOOP_IMPORTS``: it registers the
workflows and the bare tasks.

After one warm-up of every side, R rounds (5; ``--quick``: 2) run every side
once, interleaved, the order within each pair alternating by round. A side's
figure is the median wall time over rounds; the ratio framework/bare of the
medians is checked against the target (issue 3: at most 1.3x for both).
Redis commands per run are counted with ``INFO commandstats`` (reset before
each run, outside the timed region).

``--profile`` adds: the executor's work per task run in-process against the
same kind of store (SQL statements counted with a SQLAlchemy listener, time
per task split into SQL and the rest), and a cProfile of the worker's pool
processes during one framework composite and one bare chord (a separate,
profiled worker; ``AGENTLOOP_BENCH_PROFILE_DIR``).
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import glob
import inspect
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import BenchOptions

NAME = "celery"
SUMMARY = "composite of 1000 loops and 50-stage pipeline on Celery vs bare chord/chain (ratio)"

TARGET_RATIO = 1.3
DEFAULT_WIDTH = 1000
DEFAULT_STAGES = 50
DEFAULT_ROUNDS = 5
QUICK_WIDTH = 100
QUICK_STAGES = 10
QUICK_ROUNDS = 2
CONCURRENCY = 2
STORE_ENV = "AGENTLOOP_BENCH_STORE"
RESULT_TIMEOUT = 600.0
ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS_MODULE = "bench.workflows_celery"


# --------------------------------------------------------------------------- infrastructure


class NotRunnable(Exception):
    """A server the benchmark needs is missing; the message says which."""


@dataclass
class Rig:
    app: Any
    redis: Any
    broker_url: str
    database_url: str
    store_kind: str
    worker: Any
    redis_pid: int | None = None


@contextmanager
def run_store_url(kind: str) -> Iterator[str]:
    """A fresh, migrated run store of ``kind`` (``sqlite`` or ``postgres``) for the block."""
    from orchestration.store import open_store

    if kind == "postgres":
        from orchestration.testing.servers.postgres import PostgresUnavailableError, private_postgres_database

        try:
            manager = private_postgres_database()
            url = manager.__enter__()
        except PostgresUnavailableError as error:
            raise NotRunnable(f"no PostgreSQL: {error}") from error
        try:
            store, _ = open_store(url)
            store.engine.dispose()
            yield url
        finally:
            manager.__exit__(None, None, None)
        return
    if kind != "sqlite":
        raise ValueError(f"{STORE_ENV} must be sqlite or postgres, not {kind!r}")
    with tempfile.TemporaryDirectory(prefix="agentloop-bench-") as folder:
        url = f"sqlite:///{Path(folder) / 'runs.sqlite3'}"
        store, _ = open_store(url)
        store.engine.dispose()
        yield url


def _worker_env(database_url: str, stages: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        "DATABASE_URL": database_url,
        "AGENTLOOP_BENCH_PIPELINES": str(stages),
        "AGENTLOOP_BENCH_WORKER": "1",
        "PYTHONPATH": str(ROOT),
    }
    env.update(extra or {})
    return env


@contextmanager
def rig(*, store_kind: str, stages: int, worker_env: dict[str, str] | None = None) -> Iterator[Rig]:
    """A private Redis, a run store, a prefork worker importing the benchmark module, a client app."""
    import redis

    from orchestration.celery_adapter.app import create_app
    from orchestration.testing.servers.redis_server import ServiceUnavailable, private_redis_server
    from orchestration.testing.servers.worker import run_worker_process

    with ExitStack() as stack:
        try:
            server = stack.enter_context(private_redis_server())
        except ServiceUnavailable as unavailable:
            raise NotRunnable(unavailable.reason) from unavailable
        database_url = stack.enter_context(run_store_url(store_kind))
        worker = stack.enter_context(
            run_worker_process(
                broker_url=server.url,
                result_backend=server.url,
                imports=[WORKFLOWS_MODULE],
                env=_worker_env(database_url, stages, worker_env),
                concurrency=CONCURRENCY,
                loglevel="WARNING",
            )
        )
        app = create_app(overrides={"broker_url": server.url, "result_backend": server.url})
        stack.callback(app.close)
        stack.callback(_detach_result_consumer, app)
        client = redis.Redis.from_url(server.url)
        stack.callback(client.close)
        redis_pid = int(client.info("server").get("process_id", 0)) or None
        yield Rig(
            app=app,
            redis=client,
            broker_url=server.url,
            database_url=database_url,
            store_kind=store_kind,
            worker=worker,
            redis_pid=redis_pid,
        )


def _detach_result_consumer(app: Any) -> None:
    """Close the result consumer's pub/sub before the private Redis goes away (no retry noise)."""
    consumer = getattr(app.backend, "result_consumer", None)
    pubsub = getattr(consumer, "_pubsub", None)
    if consumer is not None and pubsub is not None:
        with contextlib.suppress(Exception):
            pubsub.close()
        consumer._pubsub = None


# --------------------------------------------------------------------------- the sides


@dataclass(frozen=True, kw_only=True)
class Side:
    key: str
    label: str
    workload: str  # "composite" or "pipeline"
    framework: bool
    tasks: int  # Celery tasks the side executes
    expected: Any
    send: Callable[[Rig], Any]  # returns an AsyncResult


def build_sides(width: int, stages: int) -> list[Side]:
    from celery import chain, chord

    from bench.workflows_celery import FAN, NOOP, NOOP_BODY, pipeline_name
    from orchestration.celery_adapter.tasks import LAUNCH

    def launch(runnable: str, input: Any) -> Callable[[Rig], Any]:
        def send(r: Rig) -> Any:
            return r.app.send_task(LAUNCH, kwargs={"runnable": runnable, "input": input})

        return send

    def bare_chord(r: Rig) -> Any:
        header = [r.app.signature(NOOP) for _ in range(width)]
        return chord(header, r.app.signature(NOOP_BODY)).apply_async()

    def bare_chain(r: Rig) -> Any:
        return chain(*(r.app.signature(NOOP) for _ in range(stages))).apply_async()

    return [
        Side(
            key="fw_composite",
            label=f"framework composite of {width} loops",
            workload="composite",
            framework=True,
            tasks=width + 3,  # launch + branches + merge + finalize
            expected=width,
            send=launch(FAN, width),
        ),
        Side(
            key="bare_chord",
            label=f"bare chord of {width} no-ops + body",
            workload="composite",
            framework=False,
            tasks=width + 1,
            expected=width,
            send=bare_chord,
        ),
        Side(
            key="fw_pipeline",
            label=f"framework pipeline of {stages} loops",
            workload="pipeline",
            framework=True,
            tasks=stages + 3,  # launch + stages + pipeline_done + finalize
            expected=1,
            send=launch(pipeline_name(stages), None),
        ),
        Side(
            key="bare_chain",
            label=f"bare chain of {stages} no-ops",
            workload="pipeline",
            framework=False,
            tasks=stages,
            expected=1,
            send=bare_chain,
        ),
    ]


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

    def ratio(self, workload: str) -> float:
        framework = self.results["fw_composite" if workload == "composite" else "fw_pipeline"]
        bare = self.results["bare_chord" if workload == "composite" else "bare_chain"]
        return framework.median / bare.median

    def cpu_ratio(self, workload: str) -> float:
        framework = self.results["fw_composite" if workload == "composite" else "fw_pipeline"]
        bare = self.results["bare_chord" if workload == "composite" else "bare_chain"]
        return framework.cpu_median / bare.cpu_median if bare.cpu_median else float("nan")

    @property
    def passed(self) -> bool:
        return all(self.ratio(workload) <= TARGET_RATIO for workload in ("composite", "pipeline"))


def measure(
    *, width: int, stages: int, rounds: int, store_kind: str, worker_env: dict[str, str] | None = None
) -> Report:
    sides = build_sides(width, stages)
    results = {side.key: SideResult(side=side) for side in sides}
    pairs = [(sides[0], sides[1]), (sides[2], sides[3])]
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
    return Report(width=width, stages=stages, rounds=rounds, store_kind=store_kind, results=results)


# --------------------------------------------------------------------------- printing


PAIRS = (
    ("composite", "fw_composite", "bare_chord", "branch"),
    ("pipeline", "fw_pipeline", "bare_chain", "stage"),
)


HEADERS = (
    "side",
    "tasks",
    "median s",
    "min s",
    "max s",
    "ms/task",
    "CPU ms/task",
    "redis cmds/task",
    "KiB in/task",
)


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))]
        lines.append("  ".join(cells))
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def render(report: Report) -> str:
    lines = [
        "Celery overhead: framework vs bare canvas, one run, interleaved",
        f"  redis-server (broker + results, private), prefork worker concurrency {CONCURRENCY} "
        f"(log level WARNING), run store {report.store_kind}; {report.rounds} rounds after a warm-up; "
        "wall time from send to result in this client, median over rounds",
        "",
    ]
    rows: list[tuple[str, ...]] = [HEADERS]
    for result in report.results.values():
        side = result.side
        rows.append(
            (
                side.label,
                str(side.tasks),
                f"{result.median:.3f}",
                f"{min(result.seconds):.3f}",
                f"{max(result.seconds):.3f}",
                f"{result.median / side.tasks * 1000:.2f}",
                f"{result.cpu_median / side.tasks * 1000:.2f}",
                f"{statistics.median(result.redis_commands) / side.tasks:.1f}",
                f"{statistics.median(result.redis_bytes) / side.tasks / 1024:.2f}",
            )
        )
    lines += _table(rows)
    lines += [
        "",
        "  ms/task = median wall time / tasks executed; CPU = user+system of the worker's main and pool",
        "  processes, redis-server and this client during the run (median over rounds; a PostgreSQL",
        "  server's own CPU is not counted); redis cmds and KiB in = commands Redis ran and bytes it",
        "  received (INFO commandstats / stats, reset before each run).",
        "",
    ]
    for workload, fw_key, bare_key, unit in PAIRS:
        framework, bare = report.results[fw_key], report.results[bare_key]
        units = report.width if workload == "composite" else report.stages
        ratio = report.ratio(workload)
        cpu_ratio = report.cpu_ratio(workload)
        extra_ms = (framework.median - bare.median) / units * 1000
        extra_cpu = (framework.cpu_median - bare.cpu_median) / units * 1000
        verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
        lines.append(
            f"{workload:<9} framework/bare = {ratio:.2f}x wall (target <= {TARGET_RATIO}x), "
            f"{cpu_ratio:.2f}x CPU; overhead per {unit}: {extra_ms:+.2f} ms wall, "
            f"{extra_cpu:+.2f} ms CPU  {verdict}"
        )
    lines += ["", "Redis commands per run, framework / bare (median run; the most frequent):"]
    for workload, fw_key, bare_key, _unit in PAIRS:
        fw, bare = report.results[fw_key], report.results[bare_key]
        top = (fw.redis_top + bare.redis_top).most_common(9)
        cells = ", ".join(
            f"{name} {fw.redis_top[name] // len(fw.seconds)}/{bare.redis_top[name] // len(bare.seconds)}"
            for name, _ in top
        )
        lines.append(f"  {workload}: {cells}")
    verdict = "PASS" if report.passed else "FAIL"
    lines += ["", f"target (issue 3): framework/bare <= {TARGET_RATIO}x wall time for both: {verdict}"]
    return "\n".join(lines)


# --------------------------------------------------------------------------- profiling


_RUN_STORE_FILE = os.path.join("orchestration", "store", "run_store.py")


@dataclass
class SqlCounter:
    """Counts the statements an engine sends, by the run-store method that sent them."""

    statements: Counter[str] = field(default_factory=Counter)

    def attach(self, engine: Any) -> None:
        from sqlalchemy import event

        event.listen(engine, "before_cursor_execute", self._before)

    def _before(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        frame = sys._getframe(1)
        method = "?"
        while frame is not None:
            if frame.f_code.co_filename.endswith(_RUN_STORE_FILE):
                method = frame.f_code.co_name
                break
            frame = frame.f_back  # type: ignore[assignment]
        self.statements[f"{statement.split()[0]} by store.{method}"] += 1

    def reset(self) -> None:
        self.statements.clear()


class MethodTimer:
    """Wraps the public methods of one store instance to count calls and time them."""

    def __init__(self, store: Any) -> None:
        self.calls: Counter[str] = Counter()
        self.seconds: dict[str, float] = {}
        for name in dir(type(store)):
            if name.startswith("_") or not inspect.isfunction(getattr(type(store), name, None)):
                continue
            setattr(store, name, self._wrap(name, getattr(store, name)))

    def _wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.calls[name] += 1
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

        return timed

    def reset(self) -> None:
        self.calls.clear()
        self.seconds.clear()


def _per_task_lines(
    label: str, tasks: int, seconds: float, counter: SqlCounter, timer: MethodTimer, updates: int
) -> list[str]:
    store_seconds = sum(timer.seconds.values())
    lines = [
        f"{label}: {seconds / tasks * 1000:.2f} ms per task, of which run-store calls "
        f"{store_seconds / tasks * 1000:.2f} ms; {sum(counter.statements.values()) / tasks:.1f} SQL "
        f"statements per task; {updates / tasks:.1f} update_state calls per task",
        "    store method                calls/task   ms/task",
    ]
    for name, calls in timer.calls.most_common():
        lines.append(f"    {name:<28} {calls / tasks:8.2f}  {timer.seconds[name] / tasks * 1000:8.3f}")
    lines.append("    SQL statements per task, by the store method that sent them:")
    for statement, count in counter.statements.most_common():
        lines.append(f"      {count / tasks:5.2f} x {statement}")
    return lines


def _task_like_executor(cls: Any, registry: Any, store: Any, update_state: Any) -> Any:
    """A ``NodeExecutor`` built with the settings the Celery tasks give their executors."""
    import orchestration.celery_adapter.tasks as tasks

    options: dict[str, Any] = {}
    parameters = inspect.signature(cls).parameters
    if "checkpoint_interval" in parameters and hasattr(tasks, "CHECKPOINT_SECONDS"):
        options["checkpoint_interval"] = tasks.CHECKPOINT_SECONDS
    return cls(registry=registry, store=store, update_state=update_state, **options)


def _task_like_runner() -> Callable[[Any], Any]:
    """How the Celery tasks run a coroutine (their per-thread loop), else ``asyncio.run``."""
    import orchestration.celery_adapter.tasks as tasks

    runner = getattr(tasks, "_run", None)
    return runner if callable(runner) else asyncio.run


def profile_executor(*, store_kind: str, width: int, stages: int) -> str:
    """Run the executor's per-task work in-process against a fresh store: store calls and SQL per task."""
    from bench.workflows_celery import FAN, pipeline_name
    from orchestration.engine import NodeExecutor, Step
    from orchestration.registry import registry
    from orchestration.store import open_store
    from orchestration.wire import Node

    out: list[str] = [
        f"In-process executor (no Celery; update_state is a list.append) on a fresh {store_kind} store:"
    ]
    samples = min(width, 200)
    with run_store_url(store_kind) as url:
        store, _ = open_store(url, migrate=False)
        counter = SqlCounter()
        counter.attach(store.engine)
        timer = MethodTimer(store)
        published: list[dict[str, Any]] = []
        executor = _task_like_executor(NodeExecutor, registry, store, published.append)
        run = _task_like_runner()

        def composite_branches() -> list[tuple[Any, Any]]:
            run_id = uuid.uuid4().hex
            store.create_run(run_id=run_id, runnable=FAN, input=samples)
            store.mark_running(run_id)
            answer = run(executor.start(Node(run_id=run_id, runnable=FAN), samples))
            assert isinstance(answer, Step) and answer.branches
            return list(answer.branches)

        # the composite's branch tasks (what agentloop.run does for one trivial loop)
        branches = composite_branches()
        counter.reset()
        timer.reset()
        published.clear()
        started = time.perf_counter()
        for child, child_input in branches:
            step = run(executor.start(child, child_input))
            assert isinstance(step, Step) and step.value == 1
        out += _per_task_lines(
            f"  branch task (agentloop.run, one trivial loop) x {samples}",
            samples,
            time.perf_counter() - started,
            counter,
            timer,
            len(published),
        )

        # the pipeline's stage tasks (agentloop.stage)
        pipe_id = uuid.uuid4().hex
        name = pipeline_name(stages)
        store.create_run(run_id=pipe_id, runnable=name, input=None)
        store.mark_running(pipe_id)
        node = Node(run_id=pipe_id, runnable=name)
        run(executor.start(node, None))
        counter.reset()
        timer.reset()
        published.clear()
        previous: Any = None
        started = time.perf_counter()
        for index in range(stages):
            step = run(executor.stage(previous, node, index, None))
            assert isinstance(step, Step)
            previous = step.value
        out += _per_task_lines(
            f"  stage task (agentloop.stage) x {stages}",
            stages,
            time.perf_counter() - started,
            counter,
            timer,
            len(published),
        )
        out += ["", *_store_alternatives(store, samples)]

        loops = 500
        for label, runner in (("asyncio.run()", asyncio.run), ("the tasks' coroutine runner", run)):
            started = time.perf_counter()
            for _ in range(loops):
                runner(_nothing())
            out.append(
                f"  {label} of an empty coroutine: {(time.perf_counter() - started) / loops * 1000:.3f} ms"
            )

        # cProfile of the branch tasks
        branches = composite_branches()
        profiler = cProfile.Profile()
        profiler.enable()
        for child, child_input in branches:
            run(executor.start(child, child_input))
        profiler.disable()
        out.append(f"  cProfile of {samples} in-process branch tasks, by own time (top 20):")
        out.append(_indent(_pstats_text(pstats.Stats(profiler), "tottime", 20)))
        store.engine.dispose()
    return "\n".join(out)


def _store_alternatives(store: Any, samples: int) -> list[str]:
    """A branch task's rows and reads (3 progress events, a checkpoint, the loop's result; the
    cancel flag, the run's usage, the loop's record) written and read in different ways."""
    from sqlalchemy import insert, select
    from sqlalchemy.dialects import postgresql, sqlite

    from orchestration.store.run_store import event_columns
    from orchestration.store.tables import Checkpoint, Run, RunEvent, utcnow

    run_id = uuid.uuid4().hex
    store.create_run(run_id=run_id, runnable="bench", input=None)
    dialect = postgresql if store.dialect == "postgresql" else sqlite

    def event(path: str, phase: str) -> dict[str, Any]:
        return {"run_id": run_id, "path": path, "runnable": "Trivial", "iteration": 1,
                "max_iterations": 2, "phase": phase, "status": "progress", "message": "", "data": {},
                "at": time.time()}  # fmt: skip

    def per_call_writes(i: int) -> None:  # one transaction per row: 5
        path = f"calls/{i}"
        store.append_event(run_id, event(path, "start"))
        store.save_checkpoint(run_id, path, 1, {"n": 1})
        store.append_event(run_id, event(path, "iteration"))
        store.append_event(run_id, event(path, "done"))
        store.mark_loop_finished(run_id, path, 1)

    def finish_loop_writes(i: int) -> None:  # the store's batched call (ORM session, one transaction)
        path = f"finish/{i}"
        store.finish_loop(run_id, path, 1, events=[event(path, p) for p in ("start", "iteration", "done")])

    upsert = dialect.insert(Checkpoint)
    upsert = upsert.on_conflict_do_update(
        index_elements=["run_id", "path"],
        set_={"iteration": upsert.excluded.iteration, "state": upsert.excluded.state,
              "finished": upsert.excluded.finished, "result": upsert.excluded.result,
              "updated_at": upsert.excluded.updated_at},
    )  # fmt: skip
    event_insert = insert(RunEvent)

    def core_writes(i: int) -> None:  # the same rows, one transaction, Core statements on a connection
        path = f"core/{i}"
        rows = []
        for phase in ("start", "iteration", "done"):
            payload = event(path, phase)
            columns = event_columns(payload)
            rows.append({"run_id": run_id, "payload": payload, "created_at": utcnow(), **columns})
        with store.engine.begin() as connection:
            connection.execute(event_insert, rows)
            connection.execute(
                upsert,
                [{"run_id": run_id, "path": path, "iteration": 1, "state": {"n": 1}, "finished": True,
                  "result": 1, "updated_at": utcnow()}],
            )  # fmt: skip

    def per_call_reads(i: int) -> None:  # one session per read: 4
        store.is_cancel_requested(run_id)
        store.get_run(run_id)
        store.finished_result(run_id, f"calls/{i}")
        store.load_checkpoint(run_id, f"calls/{i}")

    def loop_state_read(i: int) -> None:  # the store's combined read of the loop's record
        store.loop_state(run_id, f"calls/{i}")

    both = (
        select(Run.cancel_requested, Run.token_budget, Run.input_tokens, Run.output_tokens,
               Checkpoint.finished, Checkpoint.iteration, Checkpoint.state, Checkpoint.result)
        .select_from(Run)
        .outerjoin(Checkpoint, (Checkpoint.run_id == Run.id) & (Checkpoint.path == "calls/0"))
        .where(Run.id == run_id)
    )  # fmt: skip

    def core_read(i: int) -> None:  # one SELECT: the run's flags and usage, and the loop's record
        with store.engine.connect() as connection:
            connection.execute(both).first()

    candidates = [
        ("writes, a transaction per row: 3 x append_event, save_checkpoint, mark_loop_finished",
         "append_event", per_call_writes),
        ("writes, store.finish_loop(events=3): one transaction, ORM session",
         "finish_loop", finish_loop_writes),
        ("writes, one transaction of Core statements (executemany + one upsert)", "", core_writes),
        ("reads, a session each: is_cancel_requested, get_run, finished_result, load_checkpoint",
         "finished_result", per_call_reads),
        ("reads, store.loop_state (checkpoint row only)", "loop_state", loop_state_read),
        ("reads, one Core SELECT (run flags + usage + checkpoint row)", "", core_read),
    ]  # fmt: skip
    lines = ["  a branch task's rows and reads, done in different ways (ms per task):"]
    for label, needs, function in candidates:
        if needs and not hasattr(store, needs):
            continue
        function(-1)  # warm the statement cache
        started = time.perf_counter()
        for i in range(samples):
            function(i)
        lines.append(f"    {label:<88} {(time.perf_counter() - started) / samples * 1000:7.3f}")
    return lines


async def _nothing() -> None:
    return None


def _pstats_text(stats: pstats.Stats, sort: str, limit: int) -> str:
    buffer = io.StringIO()
    stats.stream = buffer  # type: ignore[attr-defined]
    stats.strip_dirs().sort_stats(sort).print_stats(limit)
    text = buffer.getvalue()
    start = text.find("   ncalls")
    return text[start:].rstrip() if start >= 0 else text.rstrip()


def _wait_for_files(folder: str, pattern: str, timeout: float = 10.0) -> None:
    """Wait until every pool process wrote its file (they write them as they exit)."""
    deadline = time.monotonic() + timeout
    while len(glob.glob(os.path.join(folder, pattern))) < CONCURRENCY and time.monotonic() < deadline:
        time.sleep(0.1)


def profile_timing(*, store_kind: str, width: int, stages: int, rounds: int = 3) -> str:
    """Unprofiled time per task inside the pool processes (``task_prerun`` -> ``task_postrun``)."""
    from bench.workflows_celery import TIMING_ENV

    sides = build_sides(width, stages)
    out = [
        "time per task inside the pool processes, task_prerun -> task_postrun (body + STARTED and result",
        f"writes + publishing what follows), no profiler; {rounds} runs of every side after a warm-up:",
    ]
    with tempfile.TemporaryDirectory(prefix="agentloop-bench-timing-") as folder:
        with rig(store_kind=store_kind, stages=stages, worker_env={TIMING_ENV: folder}) as r:
            for side in sides:
                run_once(r, side)  # warm-up, not timed: the pool processes time only while "on" exists
            Path(folder, "on").touch()
            for _ in range(rounds):
                for side in sides:
                    run_once(r, side)
            r.worker.terminate()
        _wait_for_files(folder, "*.timing.json")
        totals: dict[str, list[float]] = {}
        for path in glob.glob(os.path.join(folder, "*.timing.json")):
            for name, entry in json.loads(Path(path).read_text()).items():
                total = totals.setdefault(name, [0, 0.0])
                total[0] += entry["count"]
                total[1] += entry["seconds"]
    for name, (count, seconds) in sorted(totals.items()):
        out.append(f"  {name:<24} {count:6d} tasks  {seconds / count * 1000:8.2f} ms/task")
    return "\n".join(out)


def profile_worker(*, store_kind: str, width: int, stages: int) -> str:
    """cProfile of the pool processes: one framework composite in one worker, one bare chord in another."""
    sides = {side.key: side for side in build_sides(width, stages)}
    out: list[str] = []
    per_side: dict[str, tuple[pstats.Stats, dict[str, Any], float]] = {}
    for key in ("fw_composite", "bare_chord", "fw_pipeline", "bare_chain"):
        with tempfile.TemporaryDirectory(prefix="agentloop-bench-prof-") as folder:
            with rig(
                store_kind=store_kind, stages=stages, worker_env={"AGENTLOOP_BENCH_PROFILE_DIR": folder}
            ) as r:
                run_once(r, sides[key])  # warm-up, not profiled
                Path(folder, "on").touch()
                seconds, _, _ = run_once(r, sides[key])
                r.worker.terminate()
            _wait_for_files(folder, "*.json")
            profiles = glob.glob(os.path.join(folder, "*.prof"))
            if not profiles:
                out.append(f"{key}: no profile written by the pool processes")
                continue
            stats = pstats.Stats(*profiles)
            counts: dict[str, Any] = {"sql_statements": 0, "tasks": Counter()}
            for path in glob.glob(os.path.join(folder, "*.json")):
                data = json.loads(Path(path).read_text())
                counts["sql_statements"] += data["sql_statements"]
                counts["tasks"].update(data["tasks"])
            per_side[key] = (stats, counts, seconds)
    for key, (stats, counts, seconds) in per_side.items():
        tasks = sum(counts["tasks"].values())
        out.append(
            f"worker pool processes, {sides[key].label} "
            f"(1 run after a warm-up, {seconds:.2f} s under cProfile): "
            f"{tasks} tasks, {counts['sql_statements']} SQL statements "
            f"({counts['sql_statements'] / max(1, tasks):.1f}/task); tasks: {dict(counts['tasks'])}"
        )
        out.append(_focus(stats, tasks))
        out.append("  top 20 by own time:")
        out.append(_indent(_pstats_text(stats, "tottime", 20)))
        out.append("")
    return "\n".join(out)


#: Celery and SQLAlchemy functions shown with the framework's own (file suffix, function, label).
_FOCUS = (
    ("celery/app/trace.py", "trace_task", "Celery trace_task: the whole task"),
    ("celery/backends/base.py", "store_result", "Celery backend.store_result (every state)"),
    ("celery/app/task.py", "update_state", "Celery Task.update_state"),
    ("celery/app/task.py", "send_event", "Celery Task.send_event"),
    ("celery/app/task.py", "replace", "Celery Task.replace"),
    ("celery/backends/redis.py", "on_chord_part_return", "Celery redis chord counter"),
    ("asyncio/runners.py", "run", "asyncio.run"),
    ("sqlalchemy/orm/session.py", "execute", "SQLAlchemy Session.execute"),
    ("sqlalchemy/engine/base.py", "_commit_impl", "SQLAlchemy commit"),
    ("sqlalchemy/pool/base.py", "_checkout", "SQLAlchemy pool checkout (+pre-ping)"),
)
#: Every function of these files that ran is shown (the framework's own cost centres).
_FRAMEWORK_FILES = (
    "orchestration/celery_adapter/tasks.py",
    "orchestration/engine.py",
    "orchestration/store/seams.py",
    "orchestration/store/run_store.py",
    "bench/workflows_celery.py",
)


def _focus(stats: pstats.Stats, tasks: int, limit: int = 24) -> str:
    """Cumulative ms per task (and calls per task) of the framework's functions and of the
    Celery / SQLAlchemy calls they lead to; nested entries overlap (cumulative time)."""
    import asyncio.runners

    asyncio_run_line = asyncio.runners.run.__code__.co_firstlineno
    table: dict[str, tuple[int, float]] = {}
    for (filename, line, function), (_cc, calls, _tt, cumulative, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        label = None
        for suffix, name, fixed in _FOCUS:
            if function == name and filename.endswith(suffix):
                if suffix == "asyncio/runners.py" and line != asyncio_run_line:
                    break  # Runner.run, not asyncio.run
                label = fixed
                break
        else:
            for suffix in _FRAMEWORK_FILES:
                if suffix.startswith("bench/") and not function.startswith("_noop"):
                    continue  # the benchmark's own instrumentation hooks
                if filename.endswith(suffix) and not function.startswith("<"):
                    label = f"{suffix.rsplit('/', 1)[-1].removesuffix('.py')}.{function}"
                    break
        if label is None:
            continue
        previous = table.get(label, (0, 0.0))
        table[label] = (previous[0] + calls, previous[1] + cumulative)
    per_task = max(1, tasks)
    rows = sorted(table.items(), key=lambda item: -item[1][1])[:limit]
    lines = ["  cumulative ms per task (calls per task), largest first:"]
    for label, (calls, cumulative) in rows:
        lines.append(f"    {label:<46} {cumulative / per_task * 1000:8.3f} ms  ({calls / per_task:.2f})")
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


# --------------------------------------------------------------------------- entry points


def sizes(options: BenchOptions) -> tuple[int, int, int]:
    if options.size is not None:
        width, stages = options.size, max(1, options.size // 20)
    elif options.quick:
        width, stages = QUICK_WIDTH, QUICK_STAGES
    else:
        width, stages = DEFAULT_WIDTH, DEFAULT_STAGES
    rounds = options.rounds or (QUICK_ROUNDS if options.quick else DEFAULT_ROUNDS)
    return width, stages, rounds


def run(options: BenchOptions, *, store_kind: str | None = None) -> Report:
    """Measure (and, with ``options.profile``, profile); prints nothing."""
    width, stages, rounds = sizes(options)
    kind = store_kind or os.environ.get(STORE_ENV, "").strip().lower() or "sqlite"
    report = measure(width=width, stages=stages, rounds=rounds, store_kind=kind)
    if options.profile:
        report.profile_text = "\n\n".join(
            [
                profile_timing(store_kind=kind, width=width, stages=stages),
                profile_executor(store_kind=kind, width=width, stages=stages),
                profile_worker(store_kind=kind, width=width, stages=stages),
            ]
        )
    return report


def cli(options: BenchOptions) -> bool | None:
    """Run, print, and return whether the target was met (``None`` when it could not run)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        report = run(options)
    except NotRunnable as missing:
        print(f"celery benchmark NOT RUN: {missing}")
        return None
    print(render(report))
    if options.quick:
        print("(--quick: a smoke run; the figures are only indicative)")
    if report.profile_text:
        print()
        print(report.profile_text)
    return report.passed


_ABLATION_LABELS = {
    "celery_progress": "no PROGRESS state/event",
    "store_progress": "no progress rows",
    "checkpoints": "no checkpoint rows",
    "cancel": "no cancel reads",
}


def ablation_study(options: BenchOptions, variants: list[str], *, store_kind: str) -> str:
    """Each variant (comma-separated ablations) on its own worker, bare sides re-measured alongside."""
    from bench.workflows_celery import ABLATE_ENV

    width, stages, rounds = sizes(options)
    rows: list[tuple[str, ...]] = [
        (
            "framework variant (worker-side experiment)",
            "composite x wall",
            "x CPU",
            "pipeline x wall",
            "x CPU",
            "fw CPU ms/branch",
            "bare CPU ms/task",
            "fw CPU ms/stage",
            "bare CPU ms/hop",
        )
    ]
    for variant in ["", *variants]:
        report = measure(
            width=width,
            stages=stages,
            rounds=rounds,
            store_kind=store_kind,
            worker_env={ABLATE_ENV: variant} if variant else None,
        )
        res = report.results
        rows.append(
            (
                " + ".join(_ABLATION_LABELS.get(name, name) for name in variant.split(","))
                if variant
                else "as is",
                f"{report.ratio('composite'):.2f}",
                f"{report.cpu_ratio('composite'):.2f}",
                f"{report.ratio('pipeline'):.2f}",
                f"{report.cpu_ratio('pipeline'):.2f}",
                f"{res['fw_composite'].cpu_median / width * 1000:.2f}",
                f"{res['bare_chord'].cpu_median / (width + 1) * 1000:.2f}",
                f"{res['fw_pipeline'].cpu_median / stages * 1000:.2f}",
                f"{res['bare_chain'].cpu_median / stages * 1000:.2f}",
            )
        )
        print(f"  ... {rows[-1][0]}: composite {rows[-1][1]}x, pipeline {rows[-1][3]}x", flush=True)
    lines = [
        f"Ablation experiments: composite of {width}, pipeline of {stages}, {rounds} rounds each, "
        f"run store {store_kind}; each row is its own worker and its own bare measurement",
        "",
        *_table(rows),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.celery_overhead [--quick] [--rounds N] [--size N] [--profile] [--store KIND]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.celery_overhead", description=SUMMARY)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--size", type=int)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--store", choices=("sqlite", "postgres"))
    parser.add_argument(
        "--ablate",
        action="append",
        metavar="A[,B...]",
        help="instead of the benchmark: measure the framework with these parts switched off in the worker "
        "(an experiment; repeat for several variants); names: celery_progress, store_progress, "
        "checkpoints, cancel",
    )
    args = parser.parse_args(argv)
    if args.store:
        os.environ[STORE_ENV] = args.store
    options = BenchOptions(quick=args.quick, rounds=args.rounds, size=args.size, profile=args.profile)
    if args.ablate:
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        kind = os.environ.get(STORE_ENV, "").strip().lower() or "sqlite"
        print(ablation_study(options, args.ablate, store_kind=kind))
        return 0
    passed = cli(options)
    return 0 if passed is not False else 1


if __name__ == "__main__":
    sys.exit(main())

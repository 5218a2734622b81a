"""``--profile``: the engine's work per task, in-process against a fresh store, and store alternatives."""

from __future__ import annotations

import asyncio
import cProfile
import inspect
import os
import pstats
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.celery_overhead.report import indent, pstats_text
from bench.celery_overhead.rig import run_store_url

_RUN_STORE_FILE = os.path.join("orchestration", "store", "sql.py")


@dataclass
class SqlCounter:
    """Counts the statements an engine sends, by the run-store method that sent them.

    It listens to the engine's statement events, so on PostgreSQL the store sends every statement
    through SQLAlchemy while it is attached (``orchestration/store/direct.py``): the times printed
    beside the counts are that path's, not the one a worker takes."""

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


def _task_like_engine(registry: Any, store: Any, update_state: Any) -> Any:
    """A ``WorkflowEngine`` as a task builds one (``engine_for``), on the deployment's default settings."""
    from agentloop.orchestration.runtime.engine import WorkflowEngine
    from agentloop.orchestration.settings import load_settings

    return WorkflowEngine(
        registry=registry,
        store=store,
        update_state=update_state,
        checkpoint_interval=load_settings({}).checkpoint_seconds,
    )


def profile_engine(*, store_kind: str, width: int, stages: int) -> str:
    """Run the engine's per-task work in-process against a fresh store: store calls and SQL per task."""
    from agentloop import RunnableRegistry
    from agentloop.orchestration.celery_adapter.tasks import run_coroutine
    from agentloop.orchestration.runtime.next_step import Done, FanOut
    from agentloop.orchestration.store import open_store
    from agentloop.orchestration.wire import WorkflowNode
    from bench.celery_overhead.rig import WORKFLOWS_MODULE
    from bench.workflows_celery import FAN, pipeline_name

    out: list[str] = [
        f"In-process engine (no Celery; update_state is a list.append) on a fresh {store_kind} store:"
    ]
    samples = min(width, 200)
    with run_store_url(store_kind) as url:
        store, _ = open_store(url, migrate=False)
        counter = SqlCounter()
        counter.attach(store.engine)
        timer = MethodTimer(store)
        published: list[dict[str, Any]] = []
        registry = RunnableRegistry.from_modules([WORKFLOWS_MODULE])
        engine = _task_like_engine(registry, store, published.append)
        run: Callable[[Any], Any] = run_coroutine

        def composite_branches() -> list[tuple[Any, Any]]:
            run_id = uuid.uuid4().hex
            store.create_run(run_id=run_id, runnable=FAN, input=samples)
            store.mark_running(run_id)
            answer = run(engine.start(WorkflowNode(run_id=run_id, runnable=FAN), samples))
            assert isinstance(answer, FanOut) and answer.branches
            return list(answer.branches)

        # the composite's branch tasks (what agentloop.run does for one trivial loop)
        branches = composite_branches()
        counter.reset()
        timer.reset()
        published.clear()
        started = time.perf_counter()
        for child, child_input in branches:
            step = run(engine.start(child, child_input))
            assert isinstance(step, Done) and step.value == 1
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
        node = WorkflowNode(run_id=pipe_id, runnable=name)
        run(engine.start(node, None))
        counter.reset()
        timer.reset()
        published.clear()
        previous: Any = None
        started = time.perf_counter()
        for index in range(stages):
            step = run(engine.stage(previous, node, index, None))
            assert isinstance(step, Done)
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
            run(engine.start(child, child_input))
        profiler.disable()
        out.append(f"  cProfile of {samples} in-process branch tasks, by own time (top 20):")
        out.append(indent(pstats_text(pstats.Stats(profiler), "tottime", 20)))
        store.engine.dispose()
    return "\n".join(out)


def _store_alternatives(store: Any, samples: int) -> list[str]:
    """A branch task's rows and reads (3 progress events, a checkpoint, the loop's result; the
    cancel flag, the run's usage, the loop's record) written and read in different ways."""
    from sqlalchemy import insert, select
    from sqlalchemy.dialects import postgresql, sqlite

    from agentloop.orchestration.store.checks import event_columns
    from agentloop.orchestration.store.tables import checkpoints, run_events, runs, utcnow

    run_id = uuid.uuid4().hex
    store.create_run(run_id=run_id, runnable="bench", input=None)
    dialect = postgresql if store.dialect == "postgresql" else sqlite

    def event(path: str, phase: str) -> dict[str, Any]:
        return {"run_id": run_id, "path": path, "runnable": "Trivial", "iteration": 1,
                "max_iterations": 2, "phase": phase, "status": "progress", "message": "", "data": {},
                "at": time.time()}  # fmt: skip

    def per_call_writes(i: int) -> None:  # one transaction per row: 5
        path = f"calls/{i}"
        store.append_events(run_id, [event(path, "start")])
        store.save_checkpoint(run_id, path, 1, {"n": 1})
        store.append_events(run_id, [event(path, "iteration")])
        store.append_events(run_id, [event(path, "done")])
        store.finish_loop(run_id, path, 1)

    def finish_loop_writes(i: int) -> None:  # the store's batched call (one transaction)
        path = f"finish/{i}"
        store.finish_loop(run_id, path, 1, events=[event(path, p) for p in ("start", "iteration", "done")])

    upsert = dialect.insert(checkpoints)
    upsert = upsert.on_conflict_do_update(
        index_elements=["run_id", "path"],
        set_={"iteration": upsert.excluded.iteration, "state": upsert.excluded.state,
              "finished": upsert.excluded.finished, "result": upsert.excluded.result,
              "updated_at": upsert.excluded.updated_at},
    )  # fmt: skip
    event_insert = insert(run_events)

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

    def per_call_reads(i: int) -> None:  # one connection per read: 3
        store.is_cancel_requested(run_id)
        store.get_run(run_id)
        store.loop_record(run_id, f"calls/{i}")

    def loop_record_read(i: int) -> None:  # the store's combined read of the loop's record
        store.loop_record(run_id, f"calls/{i}")

    both = (
        select(runs.c.cancel_requested, runs.c.token_budget, runs.c.input_tokens, runs.c.output_tokens,
               checkpoints.c.finished, checkpoints.c.iteration, checkpoints.c.state, checkpoints.c.result)
        .select_from(runs)
        .outerjoin(checkpoints, (checkpoints.c.run_id == runs.c.id) & (checkpoints.c.path == "calls/0"))
        .where(runs.c.id == run_id)
    )  # fmt: skip

    def core_read(i: int) -> None:  # one SELECT: the run's flags and usage, and the loop's record
        with store.engine.connect() as connection:
            connection.execute(both).first()

    candidates = [
        ("writes, a transaction per row: 3 x append_events, save_checkpoint, finish_loop",
         "append_events", per_call_writes),
        ("writes, store.finish_loop(events=3): one transaction of Core statements",
         "finish_loop", finish_loop_writes),
        ("writes, one transaction of Core statements (executemany + one upsert)", "", core_writes),
        ("reads, a connection each: is_cancel_requested, get_run, loop_record",
         "loop_record", per_call_reads),
        ("reads, store.loop_record (checkpoint row only)", "loop_record", loop_record_read),
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

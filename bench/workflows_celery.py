"""What the ``celery`` benchmark's worker runs: trivial registered workflows and bare no-op tasks.

The worker imports this module through ``AGENTLOOP_IMPORTS`` (as a deployment
imports its runnables). On import it

* declares the framework workflows by name (with :func:`agentloop.register`,
  which a worker's registry reads from this module): ``bench.trivial`` (a
  loop of one iteration), ``bench.fan`` (a composite of ``input`` trivial
  loops) and ``bench.pipeline.<N>`` (a pipeline of N trivial loops) for every
  N in ``AGENTLOOP_BENCH_PIPELINES`` (comma-separated, default ``10,50``);
* registers the bare Celery tasks the framework is compared with,
  ``bench.noop`` and ``bench.noop_body``, on the deployed app
  ``agentloop.celery:app`` (the app the worker process runs), so nothing
  in ``orchestration/`` has to know about the benchmark;
* when ``AGENTLOOP_BENCH_PROFILE_DIR`` is set, profiles every pool process
  of the worker from its start to its end with ``cProfile`` and counts the SQL
  statements it sends to the run store; each process writes
  ``<pid>.prof`` and ``<pid>.json`` into that folder when it exits;
* when ``AGENTLOOP_BENCH_TIMING_DIR`` is set, times every task in the pool
  processes from ``task_prerun`` to ``task_postrun`` (its body, its
  ``STARTED`` and final result writes, the publishing of what follows it), wall and CPU
  time, and writes ``<pid>.timing.json`` at exit (with ``AGENTLOOP_BENCH_TASK_PROFILE``
  set, a cProfile of each task name's windows too: ``<pid>.<task name>.prof``);
* when ``AGENTLOOP_BENCH_TRACE_DIR`` is set, traces every PostgreSQL connection of the pool
  processes with libpq and notes each task's time window, for
  :mod:`bench.celery_overhead.round_trips`;
* when ``AGENTLOOP_BENCH_ABLATE`` is set (comma-separated), switches parts of
  the framework off *in this worker process only*, to measure what each
  costs end to end (an experiment, never a configuration: the runs are not
  durable or observable as they should be). See :data:`ABLATIONS`.

Importing it without a worker (the benchmark's client, an in-process profile)
declares the workflows too; the bare tasks are only ever named by the
client (``app.signature("bench.noop")``), never imported.
"""

from __future__ import annotations

import os
from typing import Any

from agentloop import BaseAgentLoop, BaseAgentPipeline, BaseCompositeAgent, Branch, register

TRIVIAL = "bench.trivial"
#: The same loop whose step is a coroutine (a model call's shape): the packing rule packs it.
TRIVIAL_AWAITING = "bench.trivial_awaiting"
FAN = "bench.fan"
PIPELINE_PREFIX = "bench.pipeline."
NOOP = "bench.noop"
NOOP_BODY = "bench.noop_body"
PIPELINES_ENV = "AGENTLOOP_BENCH_PIPELINES"
PROFILE_ENV = "AGENTLOOP_BENCH_PROFILE_DIR"
TIMING_ENV = "AGENTLOOP_BENCH_TIMING_DIR"
#: With :data:`TIMING_ENV`: a cProfile per task name as well.
TASK_PROFILE_ENV = "AGENTLOOP_BENCH_TASK_PROFILE"
ABLATE_ENV = "AGENTLOOP_BENCH_ABLATE"
TRACE_ENV = "AGENTLOOP_BENCH_TRACE_DIR"
DEFAULT_PIPELINES = (10, 50)


# --------------------------------------------------------------------------- framework workflows


@register(TRIVIAL)
class Trivial(BaseAgentLoop):
    """A loop of exactly one iteration: ``{"n": 0}`` -> ``{"n": 1}``; its result is 1."""

    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> dict[str, int]:
        return {"n": 0}

    def advance_state(self, *, state: dict[str, int], iteration: int) -> dict[str, int]:
        return {"n": state["n"] + 1}

    def is_complete(self, *, state: dict[str, int], iteration: int) -> bool:
        return state["n"] >= 1

    def build_result(self, *, state: dict[str, int]) -> int:
        return state["n"]


@register(TRIVIAL_AWAITING)
class TrivialAwaiting(Trivial):
    """:class:`Trivial` with ``async def advance_state``: what a model-bound loop looks like to the
    packing rule (``docs/how-to/packing.md``), with nothing to wait on."""

    async def advance_state(self, *, state: dict[str, int], iteration: int) -> dict[str, int]:  # type: ignore[override]
        return {"n": state["n"] + 1}


@register(FAN)
class TrivialFan(BaseCompositeAgent):
    """``input`` trivial loops side by side; the result is how many succeeded."""

    branch_runnables = (Trivial,)
    # Fan out fully: the default bound of 8 runs the branches on Celery in 8 lanes, chains whose
    # every message carries the rest of its lane (see the README's note on wide composites).
    max_concurrency = None

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Trivial, input=None, key=str(i)) for i in range(int(input))]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return sum(1 for result in results if result.ok and result.output == 1)


def pipeline_of(stages: int) -> type[BaseAgentPipeline]:
    """A pipeline class of ``stages`` trivial loops (its result is the last one's, 1)."""
    namespace = {"stages": (Trivial,) * stages, "__module__": __name__}
    return type(f"TrivialPipeline{stages}", (BaseAgentPipeline,), namespace)


def pipeline_name(stages: int) -> str:
    return f"{PIPELINE_PREFIX}{stages}"


def _pipeline_lengths() -> list[int]:
    raw = os.environ.get(PIPELINES_ENV, "")
    extra = [int(part) for part in raw.split(",") if part.strip()]
    return sorted({*DEFAULT_PIPELINES, *extra})


# A registry takes the classes a module declares at module level: one pipeline class per length.
for _stages in _pipeline_lengths():
    globals()[f"TrivialPipeline{_stages}"] = register(pipeline_name(_stages), pipeline_of(_stages))


# --------------------------------------------------------------------------- bare Celery tasks


def _noop(*args: Any, **kwargs: Any) -> int:
    """A bare task: takes whatever a chain hands it, returns 1."""
    return 1


def _noop_body(results: Any, *args: Any, **kwargs: Any) -> int:
    """A bare chord body: how many header results it got."""
    return len(results)


def install_bare_tasks(app: Any) -> None:
    """Register ``bench.noop`` and ``bench.noop_body`` on ``app`` (only on it)."""
    if NOOP not in app.tasks:
        app.task(name=NOOP, shared=False)(_noop)
    if NOOP_BODY not in app.tasks:
        app.task(name=NOOP_BODY, shared=False)(_noop_body)


def _in_worker() -> bool:
    """Whether this process is a ``celery worker`` (the main process, before it forks its pool)."""
    import sys

    return "worker" in sys.argv[1:] or os.environ.get("AGENTLOOP_BENCH_WORKER") == "1"


if _in_worker():
    from agentloop.celery import app as _deployed_app

    install_bare_tasks(_deployed_app)


# --------------------------------------------------------------------------- in-worker profiling


def _install_profiler(folder: str) -> None:
    """Profile each pool process (cProfile, SQL statement count) from the first task that starts
    once ``<folder>/on`` exists to the process's exit; write both out at exit."""
    import atexit
    import cProfile
    import json

    from celery import signals

    switch = os.path.join(folder, "on")
    state: dict[str, Any] = {"on": False, "sql": 0, "tasks": {}}

    def count_statement(*_args: Any, **_kwargs: Any) -> None:
        if state["on"]:
            state["sql"] += 1

    def prerun(**_kwargs: Any) -> None:
        if not state["on"] and "profile" in state and os.path.exists(switch):
            state["on"] = True
            state["profile"].enable()

    def count_task(sender: Any = None, **_kwargs: Any) -> None:
        if state["on"]:
            name = getattr(sender, "name", "?")
            state["tasks"][name] = state["tasks"].get(name, 0) + 1

    def start(**_kwargs: Any) -> None:
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        # every engine of the pool process: the run store's is the only one it opens. A listener
        # makes the store send through SQLAlchemy (store/direct.py): a profiled worker's path.
        event.listen(Engine, "before_cursor_execute", count_statement)
        state["profile"] = cProfile.Profile()
        atexit.register(dump)

    def dump(**_kwargs: Any) -> None:
        profile = state.pop("profile", None)
        if profile is None:
            return
        profile.disable()
        pid = os.getpid()
        if state["on"]:  # a process that ran no profiled task (a prefork spare) has no stats to load
            profile.dump_stats(os.path.join(folder, f"{pid}.prof"))
        with open(os.path.join(folder, f"{pid}.json"), "w") as out:
            json.dump({"pid": pid, "sql_statements": state["sql"], "tasks": state["tasks"]}, out)

    signals.worker_process_init.connect(start, weak=False)
    signals.worker_process_shutdown.connect(dump, weak=False)
    signals.task_prerun.connect(prerun, weak=False)
    signals.task_postrun.connect(count_task, weak=False)


if os.environ.get(PROFILE_ENV) and _in_worker():
    _install_profiler(os.environ[PROFILE_ENV])


# --------------------------------------------------------------------------- in-worker task timing


def _install_timing(folder: str) -> None:
    """Time each task (``task_prerun`` -> ``task_postrun``: wall and the process's CPU) per task
    name while ``<folder>/on`` exists; write the totals at process exit. With
    :data:`TASK_PROFILE_ENV` set, also a cProfile of each task name's windows alone
    (``<pid>.<task name>.prof``)."""
    import atexit
    import cProfile
    import json
    import time

    from celery import signals

    started: dict[str, tuple[float, float]] = {}
    samples: dict[str, list[tuple[float, float]]] = {}
    profiles: dict[str, cProfile.Profile] = {}
    profiling = bool(os.environ.get(TASK_PROFILE_ENV))
    switch = os.path.join(folder, "on")

    def prerun(sender: Any = None, task_id: str | None = None, **_kwargs: Any) -> None:
        if task_id is not None and os.path.exists(switch):
            if profiling:
                profiles.setdefault(getattr(sender, "name", "?"), cProfile.Profile()).enable()
            started[task_id] = (time.perf_counter(), time.process_time())

    def postrun(sender: Any = None, task_id: str | None = None, **_kwargs: Any) -> None:
        begun = started.pop(task_id or "", None)
        if begun is not None:
            cpu, wall = time.process_time() - begun[1], time.perf_counter() - begun[0]
            name = getattr(sender, "name", "?")
            if profiling:
                profiles[name].disable()
            samples.setdefault(name, []).append((wall, cpu))

    def dump(**_kwargs: Any) -> None:
        if not samples:
            return
        pid = os.getpid()
        with open(os.path.join(folder, f"{pid}.timing.json"), "w") as out:
            json.dump(samples, out)  # each task name's (wall, CPU) seconds, one pair a task
        samples.clear()
        for name, profile in profiles.items():
            profile.dump_stats(os.path.join(folder, f"{pid}.{name}.prof"))
        profiles.clear()

    signals.task_prerun.connect(prerun, weak=False)
    signals.task_postrun.connect(postrun, weak=False)
    signals.worker_process_shutdown.connect(dump, weak=False)
    signals.worker_process_init.connect(lambda **_: atexit.register(dump), weak=False)


if os.environ.get(TIMING_ENV) and _in_worker():
    _install_timing(os.environ[TIMING_ENV])


# --------------------------------------------------------------------------- in-worker libpq trace


def _install_trace(folder: str) -> None:
    """In a pool process: trace every PostgreSQL connection it opens into ``folder`` and record
    each task's window (name, start, end) in ``<pid>.windows.json``."""
    import json
    from datetime import datetime
    from pathlib import Path

    from celery import signals
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    files: list[tuple[Any, Any]] = []
    windows: list[tuple[str, str, str]] = []
    started: dict[str, str] = {}

    def connect(dbapi_connection: Any, _record: Any) -> None:
        pgconn = getattr(dbapi_connection, "pgconn", None)
        if pgconn is not None:
            out = open(os.path.join(folder, f"{os.getpid()}.{len(files)}.trace"), "w")  # noqa: SIM115
            files.append((pgconn, out))
            pgconn.trace(out.fileno())

    def flush() -> None:
        # libpq writes the trace through a buffered stream, and a pool process leaves by
        # os._exit: untracing flushes it, and tracing goes on into the same file
        for pgconn, out in files:
            if pgconn.status == 0:  # CONNECTION_OK
                pgconn.untrace()
                pgconn.trace(out.fileno())

    def prerun(task_id: str | None = None, **_kwargs: Any) -> None:
        started[task_id or ""] = datetime.now().isoformat(sep=" ")

    def postrun(sender: Any = None, task_id: str | None = None, **_kwargs: Any) -> None:
        begun = started.pop(task_id or "", None)
        if begun is not None:
            windows.append((getattr(sender, "name", "?"), begun, datetime.now().isoformat(sep=" ")))
            flush()
            Path(folder, f"{os.getpid()}.windows.json").write_text(json.dumps(windows))

    event.listen(Engine, "connect", connect)
    signals.task_prerun.connect(prerun, weak=False)
    signals.task_postrun.connect(postrun, weak=False)


if os.environ.get(TRACE_ENV) and _in_worker():
    _install_trace(os.environ[TRACE_ENV])


# --------------------------------------------------------------------------- ablation experiments


def _replace(owner: Any, name: str, function: Any) -> None:
    """Replace ``owner.name``; fail loudly when the framework no longer has it (a stale experiment)."""
    if name not in vars(owner):
        raise AttributeError(f"ablation target {owner.__qualname__}.{name} does not exist (any more)")
    setattr(owner, name, function)


def _ablate_celery_progress() -> None:
    """No ``update_state(PROGRESS)`` / ``task-progress`` event (the run store still gets the events)."""
    import agentloop.orchestration.celery_adapter.tasks as tasks

    original = tasks.engine_for

    def quiet_engine(task: Any, pack: Any = None) -> Any:
        engine = original(task, pack)
        engine.update_state = None
        return engine

    _replace(tasks, "engine_for", quiet_engine)


def _ablate_store_progress() -> None:
    """Progress events are not written to the run store (the Celery state update stays)."""
    from agentloop.orchestration.store import SqlRunStore

    finish_loop = SqlRunStore.finish_loop

    def finish_loop_without_events(
        self: Any,
        run_id: str,
        path: str,
        result: Any,
        *,
        events: Any = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> Any:
        return finish_loop(self, run_id, path, result, input_tokens=input_tokens, output_tokens=output_tokens)

    _replace(SqlRunStore, "append_events", lambda self, root_run_id, events: None)
    _replace(SqlRunStore, "finish_loop", finish_loop_without_events)


def _ablate_checkpoints() -> None:
    """No checkpoint or loop-finished rows are read or written (the progress events still are)."""
    from agentloop.orchestration.store import LoopRecord, SqlRunStore
    from agentloop.orchestration.store.seams import StoreCheckpointer

    def events_only(self: Any, run_id: str, path: str, result: Any, *, events: Any = (), **usage: int) -> Any:
        self.append_events(run_id, events)
        return result

    _replace(StoreCheckpointer, "load", lambda self, *, path: None)
    _replace(StoreCheckpointer, "save", lambda self, *, path, iteration, state: None)
    _replace(SqlRunStore, "loop_record", lambda self, run_id, path: LoopRecord(False, None, None))
    _replace(SqlRunStore, "finish_loop", events_only)


def _ablate_cancel() -> None:
    """The cancel flag is never read from the run store."""
    from agentloop.orchestration.store.seams import StoreCancelSignal

    _replace(StoreCancelSignal, "is_cancelled", lambda self: False)


#: Name -> what it switches off, for ``AGENTLOOP_BENCH_ABLATE``. They patch the framework's
#: API as of this writing; one whose target is gone fails the worker's start with a clear error.
ABLATIONS = {
    "celery_progress": _ablate_celery_progress,
    "store_progress": _ablate_store_progress,
    "checkpoints": _ablate_checkpoints,
    "cancel": _ablate_cancel,
}


def _apply_ablations(names: str) -> None:
    for name in filter(None, (part.strip() for part in names.split(","))):
        if name not in ABLATIONS:
            raise ValueError(f"unknown ablation {name!r}; known: {', '.join(ABLATIONS)}")
        ABLATIONS[name]()


if os.environ.get(ABLATE_ENV) and _in_worker():
    _apply_ablations(os.environ[ABLATE_ENV])

"""``AGENTLOOP_BENCH_THREAD_PROFILE=<folder>``: CPU profiles of a threads worker, per thread.

Imported by the benchmark's worker module when the variable is set. Each pool
thread starts a ``cProfile`` profiler timed with ``time.thread_time`` (its own
CPU, not the wall clock) at its first task, the main thread (the consumer: it
reads, acknowledges and dispatches messages) when the worker is ready; all are
dumped into ``<folder>/<thread id>.prof`` at shutdown. ``python -m
bench.model_bound.profile <folder>`` prints them merged.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import threading
import time
from typing import Any

_profiles: dict[int, cProfile.Profile] = {}
_lock = threading.Lock()


def _start_here() -> None:
    ident = threading.get_ident()
    with _lock:
        if ident in _profiles:
            return
        profile = _profiles[ident] = cProfile.Profile(time.thread_time)
    profile.enable()


def install(folder: str) -> None:
    """Profile the worker's threads; write the profiles into ``folder`` at shutdown."""
    from celery import signals

    def dump(**_kwargs: Any) -> None:
        with _lock:
            profiles = dict(_profiles)
        for ident, profile in profiles.items():
            profile.create_stats()
            profile.dump_stats(os.path.join(folder, f"{ident}.prof"))

    signals.task_prerun.connect(lambda **_: _start_here(), weak=False)
    signals.worker_ready.connect(lambda **_: _start_here(), weak=False)
    signals.worker_shutdown.connect(dump, weak=False)


def install_task_cpu(path: str) -> None:
    """Sum each task name's CPU (``time.thread_time`` from prerun to postrun) and write the sums,
    with the process's whole CPU, as JSON into ``path`` at shutdown: cheaper than a profiler and
    not skewed by it. What the tasks do not account for is the consumer's and the pool's."""
    import json

    spent: dict[str, list[float]] = {}
    started = threading.local()
    from celery import signals

    def prerun(**_kwargs: Any) -> None:
        started.at = time.thread_time()

    def postrun(task: Any = None, **_kwargs: Any) -> None:
        seconds = time.thread_time() - getattr(started, "at", time.thread_time())
        with _lock:
            entry = spent.setdefault(getattr(task, "name", "?"), [0, 0.0])
            entry[0] += 1
            entry[1] += seconds

    def dump(**_kwargs: Any) -> None:
        with open(path, "w") as out:
            # (the worker shuts down on its main thread: the consumer's, which receives and acks)
            json.dump(
                {"process_cpu": time.process_time(), "main_thread_cpu": time.thread_time(), "tasks": spent},
                out,
            )

    signals.task_prerun.connect(prerun, weak=False)
    signals.task_postrun.connect(postrun, weak=False)
    signals.worker_shutdown.connect(dump, weak=False)


def main(folder: str, lines: int = 45) -> None:
    """Print the merged profiles of ``folder``, by own time and by cumulative time."""
    stats: pstats.Stats | None = None
    for name in sorted(os.listdir(folder)):
        try:  # a profile cut short by the worker's stop is skipped
            one = pstats.Stats(os.path.join(folder, name))
        except (EOFError, ValueError, TypeError):
            continue
        stats = one if stats is None else stats.add(one)
    if stats is None:
        print(f"no readable profile in {folder}")
        return
    stats.strip_dirs().sort_stats("tottime").print_stats(lines)
    stats.sort_stats("cumulative").print_stats(lines)


if __name__ == "__main__":
    main(sys.argv[1])


#: What ``AGENTLOOP_BENCH_CPU_WRAP`` times (inclusive CPU of each call, summed per name).
WRAPPED = (
    "agentloop.orchestration.store.sql:SqlRunStore.loop_record",
    "agentloop.orchestration.store.sql:SqlRunStore.save_checkpoint",
    "agentloop.orchestration.store.sql:SqlRunStore.finish_loop",
    "agentloop.orchestration.store.sql:SqlRunStore.append_events",
    "agentloop.orchestration.store.sql:SqlRunStore.is_cancel_requested",
    "agentloop.orchestration.store.seams:ProgressPublisher.flush",
    "agentloop.orchestration.store.seams:ProgressPublisher.__call__",
    "celery.app.task:Task.update_state",
    "celery.app.task:Task.send_event",
    "celery.backends.base:BaseKeyValueStoreBackend._store_result",
    "celery.backends.redis:RedisBackend.on_chord_part_return",
    "agentloop.orchestration.runtime.engine:WorkflowEngine.instance",
    "agentloop.orchestration.runtime.engine:WorkflowEngine.scope",
    "agentloop.orchestration.celery_adapter.tasks:engine_for",
    "agentloop.orchestration.celery_adapter.tasks:run_coroutine",
    "agentloop.orchestration.celery_adapter.canvas:check_output",
    "agentloop.orchestration.wire:WorkflowNode.from_dict",
    "agentloop.orchestration.celery_adapter.edge:check_message",
)


def install_cpu_wraps(path: str) -> None:
    """Time each callable of :data:`WRAPPED` (thread CPU, inclusive); the sums go into ``path``
    (JSON) at shutdown."""
    import functools
    import importlib
    import json

    from celery import signals

    spent: dict[str, list[float]] = {}

    def wrap(name: str, original: Any) -> Any:
        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                seconds = time.thread_time() - began
                with _lock:
                    entry = spent.setdefault(name, [0, 0.0])
                    entry[0] += 1
                    entry[1] += seconds

        return timed

    for name in WRAPPED:
        module_name, _, attribute = name.partition(":")
        owner: Any = importlib.import_module(module_name)
        *parents, leaf = attribute.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        setattr(owner, leaf, wrap(name.rpartition(":")[2], getattr(owner, leaf)))

    def dump(**_kwargs: Any) -> None:
        with open(path, "w") as out:
            json.dump(spent, out)

    signals.worker_shutdown.connect(dump, weak=False)

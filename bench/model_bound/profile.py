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
            json.dump({"process_cpu": time.process_time(), "tasks": spent}, out)

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

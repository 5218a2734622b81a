"""``--profile``: time per task inside the worker's pool processes, and a cProfile of them per side."""

from __future__ import annotations

import glob
import json
import os
import pstats
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.celery_overhead.measure import run_once
from bench.celery_overhead.report import indent, pstats_text
from bench.celery_overhead.rig import CONCURRENCY, rig
from bench.celery_overhead.sides import build_sides


def _wait_for_files(folder: str, pattern: str, timeout: float = 10.0) -> None:
    """Wait until every pool process wrote its file (they write them as they exit)."""
    deadline = time.monotonic() + timeout
    while len(glob.glob(os.path.join(folder, pattern))) < CONCURRENCY and time.monotonic() < deadline:
        time.sleep(0.1)


def task_samples(folder: str) -> dict[str, list[tuple[float, float]]]:
    """Each task name's ``(wall, CPU)`` seconds, one pair a task, from the ``*.timing.json`` files
    the pool processes wrote into ``folder`` as they exited (``workflows_celery._install_timing``)."""
    _wait_for_files(folder, "*.timing.json")
    samples: dict[str, list[tuple[float, float]]] = {}
    for path in glob.glob(os.path.join(folder, "*.timing.json")):
        for name, taken in json.loads(Path(path).read_text()).items():
            samples.setdefault(name, []).extend((wall, cpu) for wall, cpu in taken)
    return samples


def profile_timing(*, store_kind: str, width: int, stages: int, rounds: int = 3) -> str:
    """Unprofiled time per task inside the pool processes (``task_prerun`` -> ``task_postrun``)."""
    from bench.workflows_celery import TIMING_ENV

    sides = build_sides(width, stages)
    out = [
        "time (and the pool process's CPU) per task inside the pool processes, task_prerun -> task_postrun",
        f"(body + STARTED and result writes + publishing what follows), no profiler; {rounds} runs of every "
        "side after a warm-up:",
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
        samples = task_samples(folder)
    for name, taken in sorted(samples.items()):
        count = len(taken)
        seconds, cpu = sum(wall for wall, _ in taken), sum(cpu for _, cpu in taken)
        per_task = f"{seconds / count * 1000:8.2f} ms/task, {cpu / count * 1000:8.2f} ms of CPU"
        out.append(f"  {name:<24} {count:6d} tasks  {per_task}")
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
            # a pool process writes its .json once its .prof is whole; a prefork worker that runs
            # packs has a spare process beyond CONCURRENCY, whose .prof may still be being written
            profiles = [
                path
                for path in glob.glob(os.path.join(folder, "*.prof"))
                if os.path.exists(path[:-5] + ".json")
            ]
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
        out.append(indent(pstats_text(stats, "tottime", 20)))
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
    "agentloop/orchestration/celery_adapter/tasks.py",
    "agentloop/orchestration/celery_adapter/canvas.py",
    "agentloop/orchestration/runtime/engine.py",
    "agentloop/orchestration/store/seams.py",
    "agentloop/orchestration/store/sql.py",
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

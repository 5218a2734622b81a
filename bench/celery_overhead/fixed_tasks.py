"""``python -m bench.celery_overhead.fixed_tasks``: the CPU of each task of the framework's pipeline.

A pipeline of N trivial stages runs as a fixed number of tasks whatever N: one, its
``agentloop.launch``, which runs the stages itself (``tasks.stages_here``); before it, four:
``agentloop.launch``, ``agentloop.stages``, ``agentloop.pipeline_done`` and
``agentloop.finalize``, the three besides the stages the fixed cost of a pipeline. This runs
``--runs`` pipelines one after another in the benchmark's rig (``rig.py``, after a warm-up) and
prints, per task name, the wall and CPU milliseconds inside the pool processes (``task_prerun``
-> ``task_postrun``: the body, the result write, the publishing of what follows; CPU of the pool
process, so the waits on Redis and PostgreSQL are not in it). CPU time moves less with the
host's load than wall time does.

``--profile`` adds a cProfile of each fixed task's windows alone, by cumulative time, so a
task's Python shows apart from the others' (the process-wide profile of ``--profile`` on the
main benchmark sums them).

Run it against another tree (the tree before a change) by running this file from a copy of
that tree's ``agentloop/`` with this ``bench/``: the worker imports both from the checkout it
is started from (``rig.ROOT``).
"""

from __future__ import annotations

import argparse
import glob
import os
import pstats
import statistics
import sys
import tempfile
from pathlib import Path

from bench.celery_overhead.measure import run_once
from bench.celery_overhead.profile_worker import task_samples
from bench.celery_overhead.report import indent, pstats_text
from bench.celery_overhead.rig import ROOT, STORE_ENV, rig
from bench.celery_overhead.sides import DEFAULT_STAGES, build_sides

#: The tasks of a pipeline whose count does not grow with its stages.
FIXED = ("agentloop.launch", "agentloop.pipeline_done", "agentloop.finalize")


def fixed_tasks(
    *, store_kind: str, stages: int, runs: int, profile: bool, lines: int = 25, keep: str | None = None
) -> str:
    """Per task name of ``runs`` pipelines of ``stages``: wall and CPU ms (and cProfiles)."""
    from bench.workflows_celery import TASK_PROFILE_ENV, TIMING_ENV

    (side,) = [side for side in build_sides(1, stages) if side.key == "fw_pipeline"]
    out = [f"{runs} pipelines of {stages} trivial stages, store {store_kind}, after a warm-up"]
    out[0] += f" (load {_load()})"
    with tempfile.TemporaryDirectory(prefix="agentloop-bench-fixed-") as folder:
        env = {TIMING_ENV: folder, **({TASK_PROFILE_ENV: "1"} if profile else {})}
        with rig(store_kind=store_kind, stages=stages, worker_env=env) as r:
            run_once(r, side)
            run_once(r, side)  # both pool processes warm, most likely
            Path(folder, "on").touch()
            walls = [run_once(r, side)[0] for _ in range(runs)]
            r.worker.terminate()
        samples = task_samples(folder)
        walls.sort()
        out.append(f"  pipeline wall, send to result: median {walls[len(walls) // 2] * 1000:.1f} ms")
        out.append(f"  {'task (median of its runs)':<26} {'tasks':>5} {'wall ms':>9} {'CPU ms':>9}")
        fixed_cpu = 0.0
        for name, taken in sorted(samples.items()):
            wall_ms = statistics.median(wall for wall, _ in taken) * 1000
            cpu_ms = statistics.median(cpu for _, cpu in taken) * 1000
            out.append(f"  {name:<26} {len(taken):5d} {wall_ms:9.2f} {cpu_ms:9.2f}")
            fixed_cpu += cpu_ms if name in FIXED else 0.0
        out.append(f"  the fixed tasks that ran: {fixed_cpu:.2f} ms of CPU a pipeline (load {_load()})")
        if profile:
            for name in FIXED:
                files = glob.glob(os.path.join(folder, f"*.{name}.prof"))
                if not files:
                    continue
                stats = pstats.Stats(*files)
                if keep:
                    stats.dump_stats(os.path.join(keep, f"{name}.prof"))
                count = len(samples.get(name, []))
                out.append(f"\ncProfile of {name} ({count} tasks), by cumulative time:")
                out.append(indent(pstats_text(stats, "cumulative", lines)))
                out.append("  by own time:")
                out.append(indent(pstats_text(stats, "tottime", lines)))
    return "\n".join(out)


def _load() -> str:
    return ", ".join(f"{value:.1f}" for value in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.celery_overhead.fixed_tasks", description=__doc__)
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="postgres")
    parser.add_argument("--stages", type=int, default=DEFAULT_STAGES)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--lines", type=int, default=25)
    parser.add_argument("--keep", metavar="DIR", help="with --profile: write each fixed task's profile there")
    args = parser.parse_args(argv)
    os.environ[STORE_ENV] = args.store
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    print(
        fixed_tasks(
            store_kind=args.store,
            stages=args.stages,
            runs=args.runs,
            profile=args.profile,
            lines=args.lines,
            keep=args.keep,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The framework on Celery vs bare Celery canvases: same broker, same worker, one run.

Two workloads, each timed from ``send`` to the result in the client:

``composite``
    framework: ``send_task("agentloop.launch", runnable="bench.fan", input=W)``,
    a composite of W trivial loops (one iteration each); the launch task
    replaces itself with ``chain(chord(W x agentloop.run, agentloop.merge),
    agentloop.finalize)``. bare: ``chord(W x bench.noop, bench.noop_body)``.
``pipeline``
    framework: ``agentloop.launch`` of ``bench.pipeline.S``, a pipeline of S
    trivial loops, replaced by ``chain(agentloop.stages, agentloop.pipeline_done,
    agentloop.finalize)`` (the S stages one after another in one task, each recorded as it
    ends: ``docs/how-to/packing.md#pipelines``). bare: ``chain(S x bench.noop)``.

W = 1000 and S = 50 by default (``--quick``: 100 and 10; ``--size N``: W = N,
S = max(1, N // 20)). Everything runs against one private ``redis-server``
(broker and results), one real prefork worker process (``celery -A
orchestration worker``, concurrency 2, log level WARNING, settings from
``agentloop.celeryconfig`` as deployed), and one run store shared by client and worker:
a SQLite file (default) or a private PostgreSQL database
(``AGENTLOOP_BENCH_STORE=postgres``). The worker imports
:mod:`bench.workflows_celery` through ``AGENTLOOP_IMPORTS``: it registers the
workflows and the bare tasks.

After one warm-up of every side, R rounds (5; ``--quick``: 2) run every side
once, interleaved, the order within each pair alternating by round. A side's
figure is the median wall time over rounds; the ratio framework/bare of the
medians is checked against the targets (issue 11: at most 1.2x for the composite; issue 3 had
1.3x; issue 36: at most 0.5x for the pipeline).
Redis commands per run are counted with ``INFO commandstats`` (reset before
each run, outside the timed region).

``--profile`` adds: the engine's work per task run in-process against the
same kind of store (SQL statements counted with a SQLAlchemy listener, time
per task split into SQL and the rest), and a cProfile of the worker's pool
processes during one framework composite and one bare chord (a separate,
profiled worker; ``AGENTLOOP_BENCH_PROFILE_DIR``); on PostgreSQL, the round trips and
durable commits each task of one pipeline sends, read off a libpq trace of the pool processes,
beside the cost of one durable commit on the same server (:mod:`.round_trips`).

The package, by job: :mod:`.rig` (Redis, run store, worker, client app),
:mod:`.sides` (the four canvases), :mod:`.measure` (one timed run, the
rounds), :mod:`.report` (the printed table and verdict),
:mod:`.profile_engine`, :mod:`.profile_worker` and :mod:`.round_trips` (``--profile``),
:mod:`.ablation` (``--ablate``) and ``__main__`` (its own command line).
"""

from __future__ import annotations

import os
import sys

from bench import BenchOptions
from bench.celery_overhead.measure import Report, measure
from bench.celery_overhead.profile_engine import profile_engine
from bench.celery_overhead.profile_worker import profile_timing, profile_worker
from bench.celery_overhead.report import render
from bench.celery_overhead.rig import ROOT, STORE_ENV, NotRunnable
from bench.celery_overhead.round_trips import profile_round_trips
from bench.celery_overhead.sides import sizes

NAME = "celery"
SUMMARY = "composite of 1000 loops and 50-stage pipeline on Celery vs bare chord/chain (ratio)"


def run(options: BenchOptions, *, store_kind: str | None = None) -> Report:
    """Measure (and, with ``options.profile``, profile); prints nothing."""
    width, stages, rounds = sizes(options)
    kind = store_kind or os.environ.get(STORE_ENV, "").strip().lower() or "sqlite"
    report = measure(width=width, stages=stages, rounds=rounds, store_kind=kind)
    if options.profile:
        report.profile_text = "\n\n".join(
            [
                profile_timing(store_kind=kind, width=width, stages=stages),
                profile_engine(store_kind=kind, width=width, stages=stages),
                profile_worker(store_kind=kind, width=width, stages=stages),
                *([profile_round_trips(stages=stages)] if kind == "postgres" else []),
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

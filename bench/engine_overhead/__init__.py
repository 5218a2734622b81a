"""Per-iteration engine overhead with progress on: the engine vs plain Python vs LangGraph.

Every side runs the same trivial loop -- state ``{"n": int}``, each step
returns a new ``{"n": n + 1}``, done at ``n >= N`` -- and, where progress is on,
hands one progress record per step to a callback that appends it to a list.

``plain``
    An ``async def`` with an inline ``while`` loop: per step the same new state
    dict and a ten-field progress record with the fields of
    :class:`~agentloop.ProgressEvent` (as a plain ``dict``, including the message
    f-string and ``time.time()``) passed to the callback. No hooks, no
    scope checks, no event type: the floor for "the same work".
``engine``
    A :class:`~agentloop.BaseAgentLoop` subclass (plain ``def`` hooks,
    ``max_iterations = N + 1``) run by ``InlineAgentRunner.request`` with
    ``on_progress``: the whole engine, i.e. scope checks, the four hooks per
    iteration, a frozen :class:`~agentloop.ProgressEvent` per iteration plus the
    ``start`` and ``done`` events (N + 2 events).
``langgraph``
    A compiled ``StateGraph`` (no checkpointer) with one ``async`` node that
    returns ``{"n": n + 1}`` and an ``async`` conditional edge back to it until
    ``n >= N`` (LangGraph runs plain ``def`` functions in a thread pool, so
    ``async`` is its faster form here); run with ``astream(stream_mode="updates")``, every update
    (``{"step": {"n": k}}``, N of them) passed to the callback;
    ``recursion_limit = N + 10``.

Two context rows run without progress: the engine with ``on_progress=None``
and LangGraph's ``ainvoke``.

All sides run in one process and one event loop, after one warm-up run each,
interleaved round by round (the order rotates every round). A side's figure is
the median over rounds of (wall time of one whole run) / N, timed with
``time.perf_counter_ns`` after a ``gc.collect()`` (everything alive after the
warm-up is ``gc.freeze()``-d first, so that collection only sees the previous
runs' garbage); per-run set-up (the runner's
scope, the graph's invocation set-up) is included and amortised over N. The
result and the number of progress records of every run are checked outside
the timed region.

:mod:`~bench.engine_overhead.sides` defines the contestants,
:mod:`~bench.engine_overhead.measure` runs and times them, and
:mod:`~bench.engine_overhead.report` prints the figures and the verdict.
"""

from __future__ import annotations

from bench import BenchOptions
from bench.engine_overhead.measure import profile_engine, run
from bench.engine_overhead.report import print_report

NAME = "engine"
SUMMARY = "per-iteration engine overhead with progress on, vs plain Python and vs LangGraph"


def cli(options: BenchOptions) -> bool | None:
    """Run, print, and return whether the target was met (``None``: not checked)."""
    report = run(quick=options.quick, iterations=options.size, rounds=options.rounds)
    if report.langgraph_missing is not None:
        print(f"LangGraph is not importable: {report.langgraph_missing}; only the plain ratio is shown.")
    print_report(report)
    if options.quick:
        print("(--quick: a smoke run; the figures are only indicative)")
    if options.profile:
        print(f"\ncProfile of one engine run ({report.iterations} iterations, progress on), by own time:")
        print(profile_engine(iterations=report.iterations))
    return report.passed

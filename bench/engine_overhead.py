"""Per-iteration engine overhead with progress on: the engine vs plain Python vs LangGraph.

Every side runs the same trivial loop -- state ``{"n": int}``, each step
returns a new ``{"n": n + 1}``, done at ``n >= N`` -- and, where progress is on,
hands one progress record per step to a callback that appends it to a list.

``plain``
    An ``async def`` with an inline ``while`` loop: per step the same new state
    dict and a ten-field progress record with the fields of
    :class:`~loops.ProgressEvent` (as a plain ``dict``, including the message
    f-string and ``time.time()``) passed to the callback. No hooks, no
    scope checks, no event type: the floor for "the same work".
``engine``
    A :class:`~loops.BaseAgentLoop` subclass (plain ``def`` hooks,
    ``max_iterations = N + 1``) run by ``InlineAgentRunner.request`` with
    ``on_progress``: the whole engine, i.e. scope checks, the four hooks per
    iteration, a frozen :class:`~loops.ProgressEvent` per iteration plus the
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
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import io
import math
import pstats
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from bench import BenchOptions
from loops import BaseAgentLoop, InlineAgentRunner, ProgressEvent

NAME = "engine"
SUMMARY = "per-iteration engine overhead with progress on, vs plain Python and vs LangGraph"

#: The target of issue 2: LangGraph's per-step time at least this many times the engine's.
TARGET_RATIO = 25.0
DEFAULT_ITERATIONS = 2000
DEFAULT_ROUNDS = 5
QUICK_ITERATIONS = 100
QUICK_ROUNDS = 2
INSTALL_HINT = "pip install '.[bench]'"

Sink = Callable[[Any], None]


# --------------------------------------------------------------------------- the three sides


class CountState(TypedDict):
    """LangGraph's state schema (module level so LangGraph can resolve the node's annotations)."""

    n: int


def make_engine_loop(iterations: int) -> type[BaseAgentLoop]:
    """A trivial loop class: ``{"n": 0}`` -> ``{"n": 1}`` -> ... until ``n >= iterations``."""

    class CountingLoop(BaseAgentLoop):
        max_iterations = iterations + 1

        def create_initial_state(self, *, input: Any) -> dict[str, int]:
            return {"n": 0}

        def advance_state(self, *, state: dict[str, int], iteration: int) -> dict[str, int]:
            return {"n": state["n"] + 1}

        def is_complete(self, *, state: dict[str, int], iteration: int) -> bool:
            return state["n"] >= iterations

        def build_result(self, *, state: dict[str, int]) -> int:
            return state["n"]

    return CountingLoop


async def plain_loop(*, iterations: int, on_progress: Sink | None) -> int:
    """The same loop in plain Python, with the same progress record as a ``dict``."""
    bound = iterations + 1
    run_id = uuid.uuid4().hex
    state = {"n": 0}
    iteration = 0
    while not state["n"] >= iterations and iteration < bound:
        state = {"n": state["n"] + 1}
        iteration += 1
        if on_progress is not None:
            on_progress(
                {
                    "run_id": run_id,
                    "path": "",
                    "runnable": "plain",
                    "iteration": iteration,
                    "max_iterations": bound,
                    "phase": "iteration",
                    "status": "progress",
                    "message": f"iteration {iteration} of at most {bound}",
                    "data": {},
                    "at": time.time(),
                }
            )
    return state["n"]


def build_langgraph(iterations: int) -> Any:
    """The same loop as a compiled LangGraph ``StateGraph``; ``None`` when LangGraph is missing."""
    try:
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        return None

    async def step(state: CountState) -> dict[str, int]:
        return {"n": state["n"] + 1}

    # ``async`` too: LangGraph runs a plain ``def`` node or edge function in a thread
    # pool, which costs it a thread hand-off per step; async is its faster form here.
    async def route(state: CountState) -> str:
        return str(END) if state["n"] >= iterations else "step"

    graph = StateGraph(CountState)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", route)
    return graph.compile()


@dataclass(frozen=True, kw_only=True, slots=True)
class Side:
    """One contestant: how to run it once and what a correct run looks like."""

    key: str
    label: str
    description: str
    progress: bool
    expected_events: int
    primary: bool
    run: Callable[[Sink | None], Awaitable[int]]


def build_sides(iterations: int, graph: Any) -> list[Side]:
    """The sides in display order; the LangGraph ones only when ``graph`` is not ``None``."""
    runner = InlineAgentRunner.create(runnable=make_engine_loop(iterations))
    config = {"recursion_limit": iterations + 10}

    async def run_plain(sink: Sink | None) -> int:
        return await plain_loop(iterations=iterations, on_progress=sink)

    async def run_engine(sink: Sink | None) -> int:
        callback: Callable[[ProgressEvent], None] | None = sink
        return int(await runner.request(input=None, on_progress=callback))

    async def run_langgraph_stream(sink: Sink | None) -> int:
        update: Any = None
        async for update in graph.astream({"n": 0}, config, stream_mode="updates"):
            if sink is not None:
                sink(update)
        return int(update["step"]["n"])

    async def run_langgraph_invoke(sink: Sink | None) -> int:
        output = await graph.ainvoke({"n": 0}, config)
        return int(output["n"])

    sides = [
        Side(
            key="plain",
            label="plain Python",
            description="inline async while-loop; new state dict + 10-field progress dict per step",
            progress=True,
            expected_events=iterations,
            primary=True,
            run=run_plain,
        ),
        Side(
            key="engine",
            label="engine",
            description="BaseAgentLoop via InlineAgentRunner.request, on_progress=list.append "
            "(frozen ProgressEvent per step + start/done)",
            progress=True,
            expected_events=iterations + 2,
            primary=True,
            run=run_engine,
        ),
        Side(
            key="engine_quiet",
            label="engine, no progress",
            description="the same, on_progress=None (events are still built)",
            progress=False,
            expected_events=0,
            primary=False,
            run=run_engine,
        ),
    ]
    if graph is not None:
        sides += [
            Side(
                key="langgraph",
                label="LangGraph astream",
                description="StateGraph, one async node + async conditional edge, no checkpointer; "
                'astream(stream_mode="updates"), each update to the callback',
                progress=True,
                expected_events=iterations,
                primary=True,
                run=run_langgraph_stream,
            ),
            Side(
                key="langgraph_quiet",
                label="LangGraph ainvoke",
                description="the same graph via ainvoke (no stream)",
                progress=False,
                expected_events=0,
                primary=False,
                run=run_langgraph_invoke,
            ),
        ]
    return sides


# --------------------------------------------------------------------------- measuring


@dataclass(frozen=True, kw_only=True, slots=True)
class SideResult:
    key: str
    label: str
    description: str
    progress: bool
    primary: bool
    iterations: int
    #: Wall time of each measured run (``time.perf_counter_ns``).
    samples_ns: tuple[int, ...]
    #: CPU time of the process, all threads, over the same runs (``time.process_time_ns``).
    cpu_samples_ns: tuple[int, ...]

    def _per_step_us(self, total_ns: float) -> float:
        return total_ns / self.iterations / 1000.0

    @property
    def per_step_us(self) -> float:
        """Median over rounds of one run's wall time divided by the iterations, in microseconds."""
        return self._per_step_us(statistics.median(self.samples_ns))

    @property
    def min_per_step_us(self) -> float:
        return self._per_step_us(min(self.samples_ns))

    @property
    def max_per_step_us(self) -> float:
        return self._per_step_us(max(self.samples_ns))

    @property
    def cpu_per_step_us(self) -> float:
        """The median CPU time per step: less sensitive to other processes on a busy machine."""
        return self._per_step_us(statistics.median(self.cpu_samples_ns))


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineOverheadReport:
    iterations: int
    rounds: int
    sides: tuple[SideResult, ...]
    #: Why LangGraph was not measured, or ``None`` when it was.
    langgraph_missing: str | None = None
    target_ratio: float = TARGET_RATIO

    def side(self, key: str) -> SideResult | None:
        return next((side for side in self.sides if side.key == key), None)

    def _required(self, key: str) -> SideResult:
        side = self.side(key)
        if side is None:
            raise KeyError(key)
        return side

    @property
    def plain(self) -> SideResult:
        return self._required("plain")

    @property
    def engine(self) -> SideResult:
        return self._required("engine")

    @property
    def langgraph(self) -> SideResult | None:
        return self.side("langgraph")

    @property
    def engine_vs_plain(self) -> float:
        """Engine per-step time / plain-Python per-step time (both with progress)."""
        return self.engine.per_step_us / self.plain.per_step_us

    @property
    def langgraph_vs_engine(self) -> float | None:
        """LangGraph per-step time / engine per-step time (both with progress): the target ratio."""
        langgraph = self.langgraph
        return None if langgraph is None else langgraph.per_step_us / self.engine.per_step_us

    @property
    def langgraph_vs_engine_net(self) -> float | None:
        """The same ratio with the plain-Python time (the work itself) subtracted from both sides."""
        langgraph = self.langgraph
        if langgraph is None:
            return None
        engine_net = self.engine.per_step_us - self.plain.per_step_us
        if engine_net <= 0:
            return math.inf
        return (langgraph.per_step_us - self.plain.per_step_us) / engine_net

    @property
    def engine_vs_plain_cpu(self) -> float:
        """:attr:`engine_vs_plain` on CPU time."""
        return self.engine.cpu_per_step_us / self.plain.cpu_per_step_us

    @property
    def langgraph_vs_engine_cpu(self) -> float | None:
        """:attr:`langgraph_vs_engine` on CPU time (all of the process's threads)."""
        langgraph = self.langgraph
        return None if langgraph is None else langgraph.cpu_per_step_us / self.engine.cpu_per_step_us

    @property
    def passed(self) -> bool | None:
        """Whether the target is met; ``None`` when LangGraph could not be measured."""
        ratio = self.langgraph_vs_engine
        return None if ratio is None else ratio >= self.target_ratio


async def _run_checked(side: Side, iterations: int, *, collect: bool = True) -> tuple[int, int]:
    """Run ``side`` once; return its (wall, CPU) time in nanoseconds after checking its result."""
    events: list[Any] = []
    sink: Sink | None = events.append if side.progress else None
    if collect:
        gc.collect()
    cpu_start = time.process_time_ns()
    start = time.perf_counter_ns()
    result = await side.run(sink)
    elapsed = time.perf_counter_ns() - start
    cpu = time.process_time_ns() - cpu_start
    if result != iterations or len(events) != side.expected_events:
        raise RuntimeError(
            f"{side.label}: expected n={iterations} and {side.expected_events} progress records, "
            f"got n={result} and {len(events)}"
        )
    return elapsed, cpu


async def _measure(
    sides: Sequence[Side], *, iterations: int, rounds: int
) -> dict[str, list[tuple[int, int]]]:
    samples: dict[str, list[tuple[int, int]]] = {side.key: [] for side in sides}
    for side in sides:  # warm-up: imports, caches, first-call costs
        await _run_checked(side, iterations, collect=False)
    # Move everything alive now out of the collector's sight, so that the
    # ``gc.collect()`` before each run only sees the previous runs' garbage.
    gc.collect()
    gc.freeze()
    try:
        for round_index in range(rounds):
            shift = round_index % len(sides)
            for side in [*sides[shift:], *sides[:shift]]:
                samples[side.key].append(await _run_checked(side, iterations))
    finally:
        gc.unfreeze()
    return samples


def run(
    *,
    quick: bool = False,
    iterations: int | None = None,
    rounds: int | None = None,
    include_langgraph: bool = True,
) -> EngineOverheadReport:
    """Measure every side in one run and return the report (prints nothing).

    Must be called with no event loop running (it uses :func:`asyncio.run`).
    """
    iterations = iterations or (QUICK_ITERATIONS if quick else DEFAULT_ITERATIONS)
    rounds = rounds or (QUICK_ROUNDS if quick else DEFAULT_ROUNDS)
    if iterations < 1 or rounds < 1:
        raise ValueError("iterations and rounds must be at least 1")
    graph = build_langgraph(iterations) if include_langgraph else None
    missing = None
    if graph is None:
        missing = "not requested" if not include_langgraph else f"langgraph is not installed ({INSTALL_HINT})"
    sides = build_sides(iterations, graph)
    samples = asyncio.run(_measure(sides, iterations=iterations, rounds=rounds))
    results = tuple(
        SideResult(
            key=side.key,
            label=side.label,
            description=side.description,
            progress=side.progress,
            primary=side.primary,
            iterations=iterations,
            samples_ns=tuple(wall for wall, _ in samples[side.key]),
            cpu_samples_ns=tuple(cpu for _, cpu in samples[side.key]),
        )
        for side in sides
    )
    return EngineOverheadReport(
        iterations=iterations, rounds=rounds, sides=results, langgraph_missing=missing
    )


def profile_engine(*, iterations: int, limit: int = 20) -> str:
    """A cProfile breakdown (by own time) of one engine run with progress on."""
    runner = InlineAgentRunner.create(runnable=make_engine_loop(iterations))
    events: list[ProgressEvent] = []

    async def once() -> None:
        await runner.request(input=None, on_progress=events.append)

    asyncio.run(once())  # warm-up
    events.clear()
    profiler = cProfile.Profile()
    profiler.enable()
    asyncio.run(once())
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(limit)
    return out.getvalue()


# --------------------------------------------------------------------------- printing


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}x"


def title(report: EngineOverheadReport) -> str:
    return (
        f"engine overhead: {report.iterations} iterations per run, "
        f"{report.rounds} interleaved rounds, median per step"
    )


def summary_lines(report: EngineOverheadReport) -> list[str]:
    """The ratios and the verdict, one per line (wall-clock ratios; CPU-time ones in brackets)."""
    lines = [
        f"engine/plain     = {_ratio(report.engine_vs_plain)}  (cpu: {_ratio(report.engine_vs_plain_cpu)})"
        "  engine per-step time over plain Python doing the same work",
    ]
    if report.langgraph is None:
        lines.append(f"langgraph/engine = n/a  LangGraph not measured: {report.langgraph_missing}")
        lines.append(f"target: langgraph/engine >= {report.target_ratio:g}x -> NOT CHECKED")
        return lines
    lines.append(
        f"langgraph/engine = {_ratio(report.langgraph_vs_engine)}  "
        f"(cpu: {_ratio(report.langgraph_vs_engine_cpu)}; "
        f"net of the plain-Python work: {_ratio(report.langgraph_vs_engine_net)})"
    )
    verdict = "PASS" if report.passed else "FAIL"
    lines.append(
        f"target: engine per-step overhead at least {report.target_ratio:g}x lower than LangGraph's "
        f"(wall-clock langgraph/engine >= {report.target_ratio:g}x) -> {verdict}"
    )
    return lines


_HEADERS = ("side", "progress", "µs/step", "min", "max", "cpu µs/step", "vs plain")


def _rows(report: EngineOverheadReport) -> list[tuple[str, ...]]:
    plain = report.plain.per_step_us
    return [
        (
            side.label,
            "on" if side.progress else "off",
            f"{side.per_step_us:.2f}",
            f"{side.min_per_step_us:.2f}",
            f"{side.max_per_step_us:.2f}",
            f"{side.cpu_per_step_us:.2f}",
            f"{side.per_step_us / plain:.1f}x",
        )
        for side in report.sides
    ]


def _notes(report: EngineOverheadReport) -> list[str]:
    return [
        "µs/step: wall time of one run / iterations (median, min, max over rounds); "
        "cpu: process CPU time, median",
        *(f"{side.label}: {side.description}" for side in report.sides),
    ]


def render(report: EngineOverheadReport) -> str:
    """The whole report as plain text (what :func:`print_report` prints without ``rich``)."""
    rows = [_HEADERS, *_rows(report)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADERS))]
    lines = [title(report)]
    for index, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        cells += [cell.rjust(width) for cell, width in zip(row[2:], widths[2:], strict=True)]
        lines.append("  ".join(cells))
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    lines += ["", *(f"  {note}" for note in _notes(report)), "", *summary_lines(report)]
    return "\n".join(lines)


def print_report(report: EngineOverheadReport) -> None:
    """Print the report: a ``rich`` table when ``rich`` is importable, plain text otherwise."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(render(report))
        return
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 120)
    table = Table(title=title(report), title_justify="left")
    for index, header in enumerate(_HEADERS):
        table.add_column(header, justify="left" if index < 2 else "right", no_wrap=True)
    for side, row in zip(report.sides, _rows(report), strict=True):
        table.add_row(*row, style=None if side.primary else "dim")
    console.print(table)
    for note in _notes(report):
        console.print(f"  {note}", highlight=False, markup=False, soft_wrap=True)
    console.print()
    for line in summary_lines(report):
        style = "green" if line.endswith("PASS") else "red" if line.endswith("FAIL") else None
        console.print(line, style=style, highlight=False, markup=False, soft_wrap=True)


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

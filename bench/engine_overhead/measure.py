"""Measuring the sides: interleaved rounds, the figures per side and the ratios, a cProfile of the engine."""

from __future__ import annotations

import asyncio
import cProfile
import gc
import io
import math
import pstats
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentloop import InlineAgentRunner, ProgressEvent
from bench.engine_overhead.sides import Side, Sink, build_langgraph, build_sides, make_engine_loop

#: The target of issue 2: LangGraph's per-step time at least this many times the engine's.
TARGET_RATIO = 25.0
DEFAULT_ITERATIONS = 2000
DEFAULT_ROUNDS = 5
QUICK_ITERATIONS = 100
QUICK_ROUNDS = 2
INSTALL_HINT = "pip install '.[bench]'"


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

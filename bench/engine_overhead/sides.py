"""The three sides of the ``engine`` benchmark: the engine, plain Python and LangGraph running one loop."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypedDict

from agentloop import BaseAgentLoop, InlineAgentRunner, ProgressEvent

#: Where a side hands its progress records (``list.append`` in the benchmark).
Sink = Callable[[Any], None]


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

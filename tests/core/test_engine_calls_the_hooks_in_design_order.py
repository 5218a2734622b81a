"""The iteration engine of ``BaseAgentLoop`` (DESIGN §5): the hooks in order, sync or async."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from engine_support import counting_loop, run

from agentloop.loops import BaseAgentLoop, InlineAgentRunner, ProgressEvent


class LoggedLoop(BaseAgentLoop):
    """Every hook appends to ``log``; completes after two iterations; compresses before the second."""

    max_iterations = 5

    def __init__(self, *, context: Any = None) -> None:
        super().__init__(context=context)
        self.log: list[str] = context["log"]

    def create_initial_state(self, *, input: Any) -> Any:
        self.log.append(f"create_initial_state({input})")
        return {"n": 0}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        self.log.append(f"is_complete({iteration})")
        return bool(state["n"] >= self.context["complete_at"])

    def should_compress(self, *, state: Any, iteration: int) -> bool:
        self.log.append(f"should_compress({iteration})")
        return iteration == 1

    def compress_state(self, *, state: Any, iteration: int) -> Any:
        self.log.append(f"compress_state({iteration})")
        return {**state, "compressed": True}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        self.log.append(f"advance_state({iteration})")
        return {**state, "n": state["n"] + 1}

    def build_progress_event(self, *, state: Any, iteration: int) -> ProgressEvent:
        self.log.append(f"build_progress_event({iteration})")
        return super().build_progress_event(state=state, iteration=iteration)

    def build_result(self, *, state: Any) -> Any:
        self.log.append("build_result")
        return state

    def build_bounded_result(self, *, state: Any) -> Any:
        self.log.append("build_bounded_result")
        return {**state, "bounded": True}


class AsyncLoggedLoop(LoggedLoop):
    """The same hooks written as ``async def``: the engine awaits what is awaitable."""

    async def create_initial_state(self, *, input: Any) -> Any:
        await asyncio.sleep(0)
        return super().create_initial_state(input=input)

    async def is_complete(self, *, state: Any, iteration: int) -> bool:
        await asyncio.sleep(0)
        return super().is_complete(state=state, iteration=iteration)

    async def should_compress(self, *, state: Any, iteration: int) -> bool:
        return super().should_compress(state=state, iteration=iteration)

    async def compress_state(self, *, state: Any, iteration: int) -> Any:
        return super().compress_state(state=state, iteration=iteration)

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        await asyncio.sleep(0)
        return super().advance_state(state=state, iteration=iteration)

    async def build_progress_event(self, *, state: Any, iteration: int) -> ProgressEvent:
        return super().build_progress_event(state=state, iteration=iteration)

    async def build_result(self, *, state: Any) -> Any:
        return super().build_result(state=state)

    async def build_bounded_result(self, *, state: Any) -> Any:
        return super().build_bounded_result(state=state)


def logged_run(loop_cls: type[LoggedLoop], *, complete_at: int) -> tuple[Any, list[str]]:
    log: list[str] = []

    def on_progress(event: ProgressEvent) -> None:
        log.append(f"event {event.phase}/{event.status} @{event.iteration}")

    runner = InlineAgentRunner.create(runnable=loop_cls, context={"log": log, "complete_at": complete_at})
    result = runner.request_sync(input="in", on_progress=on_progress)
    return result, log


@pytest.mark.parametrize("loop_cls", [LoggedLoop, AsyncLoggedLoop], ids=["sync hooks", "async hooks"])
def test_the_engine_calls_the_hooks_in_the_order_of_the_design(loop_cls: type[LoggedLoop]) -> None:
    result, log = logged_run(loop_cls, complete_at=2)

    assert result == {"n": 2, "compressed": True}
    assert log == [
        "create_initial_state(in)",
        "event start/started @0",
        # iteration 0: not complete, under the bound, no compression
        "is_complete(0)",
        "should_compress(0)",
        "advance_state(0)",
        "build_progress_event(1)",
        "event iteration/progress @1",
        # iteration 1: compress first, then advance
        "is_complete(1)",
        "should_compress(1)",
        "compress_state(1)",
        "event compress/progress @1",
        "advance_state(1)",
        "build_progress_event(2)",
        "event iteration/progress @2",
        # complete: the result is built from the final state
        "is_complete(2)",
        "build_result",
        "event done/completed @2",
    ]


@pytest.mark.parametrize("loop_cls", [LoggedLoop, AsyncLoggedLoop], ids=["sync hooks", "async hooks"])
def test_completion_is_checked_before_the_bound(loop_cls: type[LoggedLoop]) -> None:
    class CompleteAtTheBound(loop_cls):  # type: ignore[valid-type,misc]
        max_iterations = 2

    result, log = logged_run(CompleteAtTheBound, complete_at=2)

    assert log[-3:] == ["is_complete(2)", "build_result", "event done/completed @2"]
    assert "bounded" not in result


@pytest.mark.parametrize("loop_cls", [LoggedLoop, AsyncLoggedLoop], ids=["sync hooks", "async hooks"])
def test_at_the_bound_the_engine_builds_the_bounded_result_without_advancing(
    loop_cls: type[LoggedLoop],
) -> None:
    class Bounded(loop_cls):  # type: ignore[valid-type,misc]
        max_iterations = 1

    result, log = logged_run(Bounded, complete_at=99)

    assert result == {"n": 1, "bounded": True}
    assert log == [
        "create_initial_state(in)",
        "event start/started @0",
        "is_complete(0)",
        "should_compress(0)",
        "advance_state(0)",
        "build_progress_event(1)",
        "event iteration/progress @1",
        "is_complete(1)",
        "build_bounded_result",
        "event done/completed @1",
    ]


def test_the_bounded_result_defaults_to_the_ordinary_result() -> None:
    assert run(counting_loop(bound=2, target=50)) == 2


def test_a_loop_that_leaves_an_abstract_hook_unimplemented_cannot_be_created() -> None:
    class Incomplete(BaseAgentLoop):
        def create_initial_state(self, *, input: Any) -> Any:
            return {}

    with pytest.raises(TypeError, match="abstract"):
        Incomplete.create(context=None)

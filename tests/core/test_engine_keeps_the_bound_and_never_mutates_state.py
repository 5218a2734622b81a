"""The engine runs at most ``max_iterations`` without recursion; ``check_loop`` catches in-place mutation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from engine_support import FAST, CountingLoop, counting_loop, run
from hypothesis import given
from hypothesis import strategies as st

from agentloop.loops import ProgressEvent
from agentloop.testing import check_loop


@FAST
@given(bound=st.integers(0, 50), complete_after=st.integers(0, 60))
def test_advance_state_runs_exactly_min_of_bound_and_completion_point(
    bound: int, complete_after: int
) -> None:
    loop_cls = counting_loop(bound=bound, target=complete_after)

    report = asyncio.run(check_loop(loop_cls, input=None))

    assert report.advance_calls == min(bound, complete_after)
    assert report.result == min(bound, complete_after)
    assert report.states == [{"count": n} for n in range(1, min(bound, complete_after) + 1)]


def test_the_engine_does_not_recurse_so_any_bound_works() -> None:
    assert run(counting_loop(bound=5000, target=5000)) == 5000


class MutatingLoop(CountingLoop):
    """Breaks the rule: one hook changes the state it was given, on one iteration."""

    max_iterations = 10
    target = 5
    mutating_hook = "advance_state"
    mutate_at = 0

    def _maybe_mutate(self, hook: str, state: Any, iteration: int) -> None:
        if hook == self.mutating_hook and iteration == self.mutate_at:
            state["scribble"] = iteration

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        self._maybe_mutate("advance_state", state, iteration)
        return {"count": state["count"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        self._maybe_mutate("is_complete", state, iteration)
        return bool(state["count"] >= self.target)

    def should_compress(self, *, state: Any, iteration: int) -> bool:
        self._maybe_mutate("should_compress", state, iteration)
        return False

    def build_progress_event(self, *, state: Any, iteration: int) -> ProgressEvent:
        self._maybe_mutate("build_progress_event", state, iteration)
        return super().build_progress_event(state=state, iteration=iteration)


@FAST
@given(
    hook=st.sampled_from(["advance_state", "is_complete", "should_compress", "build_progress_event"]),
    at=st.integers(0, 4),
)
def test_check_loop_catches_a_loop_that_mutates_its_state_in_place(hook: str, at: int) -> None:
    # build_progress_event sees the finished-iteration count (1-based), the others the 0-based one
    at = at + 1 if hook == "build_progress_event" else at
    bad = type("MutatingLoop", (MutatingLoop,), {"mutating_hook": hook, "mutate_at": at})

    with pytest.raises(AssertionError, match=f"MutatingLoop.{hook} mutated the state in place"):
        asyncio.run(check_loop(bad, input=None))


@FAST
@given(
    input=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
        max_leaves=8,
    )
)
def test_a_loop_that_returns_new_states_passes_check_loop_for_any_json_input(input: Any) -> None:
    class Echo(CountingLoop):
        target = 2

        def create_initial_state(self, *, input: Any) -> Any:
            return {"count": 0, "input": input}

        def advance_state(self, *, state: Any, iteration: int) -> Any:
            return {**state, "count": state["count"] + 1}

        def build_result(self, *, state: Any) -> Any:
            return state["input"]

    report = asyncio.run(check_loop(Echo, input=input))

    assert report.result == input
    assert report.advance_calls == 2

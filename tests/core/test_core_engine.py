"""The iteration engine of ``BaseAgentLoop`` (DESIGN §5), hook by hook and in order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actions import AgentActionRegistry, BaseAgentAction, UnknownActionError
from loops import BaseAgentLoop, InlineAgentRunner, ProgressEvent, ProgressStatus
from orchestration.testing import ProgressRecorder, check_loop

FAST = settings(max_examples=40, deadline=None)


class CountingLoop(BaseAgentLoop):
    """Counts up by one per iteration; complete once the count reaches ``target``."""

    max_iterations = 10
    target = 3

    def create_initial_state(self, *, input: Any) -> Any:
        return {"count": 0}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {"count": state["count"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["count"] >= self.target)

    def build_result(self, *, state: Any) -> Any:
        return state["count"]


def counting_loop(*, bound: int, target: int) -> type[CountingLoop]:
    return type("CountingLoop", (CountingLoop,), {"max_iterations": bound, "target": target})


def run(loop_cls: type[Any], *, input: Any = None, **options: Any) -> Any:
    return asyncio.run(InlineAgentRunner.create(runnable=loop_cls).request(input=input, **options))


# ----- the order of the engine --------------------------------------------------------------------


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


# ----- the bound, recursion, immutability ---------------------------------------------------------


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


# ----- the progress stream ------------------------------------------------------------------------


@FAST
@given(bound=st.integers(0, 20), complete_after=st.integers(0, 25))
def test_a_loop_reports_started_then_one_progress_per_iteration_then_completed(
    bound: int, complete_after: int
) -> None:
    recorder = ProgressRecorder()
    run(counting_loop(bound=bound, target=complete_after), on_progress=recorder)

    iterations = min(bound, complete_after)
    stopped_by = "complete" if complete_after <= bound else "bound"
    assert recorder.transcript() == {
        "": [
            ("CountingLoop", "start", "started", 0, bound, "", {}),
            *[
                ("CountingLoop", "iteration", "progress", n, bound, f"iteration {n} of at most {bound}", {})
                for n in range(1, iterations + 1)
            ],
            (
                "CountingLoop",
                "done",
                "completed",
                iterations,
                bound,
                "complete" if stopped_by == "complete" else "hit the iteration bound",
                {"stopped_by": stopped_by},
            ),
        ]
    }


@FAST
@given(
    fail_at=st.integers(1, 5),
    hook=st.sampled_from(["advance_state", "is_complete", "build_progress_event", "should_compress"]),
)
def test_a_hook_that_raises_ends_the_stream_with_failed_in_phase_error(fail_at: int, hook: str) -> None:
    def boom(self: Any, *, state: Any, iteration: int) -> Any:
        if iteration == fail_at:
            raise RuntimeError(f"{hook} broke")
        return getattr(CountingLoop, hook)(self, state=state, iteration=iteration)

    broken = type("Broken", (CountingLoop,), {hook: boom, "target": 99})
    recorder = ProgressRecorder()

    with pytest.raises(RuntimeError, match=f"{hook} broke"):
        run(broken, on_progress=recorder)

    # build_progress_event is told the count of finished iterations, so it fails one event earlier
    progress_events = fail_at - 1 if hook == "build_progress_event" else fail_at
    assert recorder.statuses("") == ["started", *["progress"] * progress_events, "failed"]
    last = recorder.events[-1]
    assert (last.phase, last.iteration, last.message) == ("error", fail_at, f"RuntimeError: {hook} broke")


def test_every_event_of_a_loop_is_json_data_that_round_trips() -> None:
    recorder = ProgressRecorder()
    run(counting_loop(bound=4, target=3), on_progress=recorder, run_id="run-1")

    for event in recorder.events:
        assert ProgressEvent.from_json(event.to_json()) == event
        assert event.run_id == "run-1"
        assert event.status in set(ProgressStatus)


# ----- checkpoints: a redelivered loop resumes ----------------------------------------------------


class MemoryCheckpointer:
    def __init__(self, saved: dict[str, tuple[int, Any]] | None = None) -> None:
        self.saved: dict[str, tuple[int, Any]] = dict(saved or {})
        self.log: list[tuple[str, int, Any]] = []

    def load(self, *, path: str) -> tuple[int, Any] | None:
        return self.saved.get(path)

    def save(self, *, path: str, iteration: int, state: Any) -> None:
        self.log.append((path, iteration, state))
        self.saved[path] = (iteration, state)


def test_every_finished_iteration_is_checkpointed() -> None:
    checkpointer = MemoryCheckpointer()

    assert run(counting_loop(bound=10, target=3), checkpointer=checkpointer) == 3
    assert checkpointer.log == [("", 1, {"count": 1}), ("", 2, {"count": 2}), ("", 3, {"count": 3})]


def test_a_loop_with_a_checkpoint_resumes_after_the_last_finished_iteration() -> None:
    class Resumable(CountingLoop):
        max_iterations = 6
        target = 5

        def create_initial_state(self, *, input: Any) -> Any:
            raise AssertionError("a resumed loop must not start over")

    checkpointer = MemoryCheckpointer({"": (3, {"count": 3})})
    recorder = ProgressRecorder()

    assert run(Resumable, checkpointer=checkpointer, on_progress=recorder) == 5
    assert recorder.transcript()[""] == [
        ("Resumable", "resume", "started", 3, 6, "resumed after iteration 3", {"resumed_from": 3}),
        ("Resumable", "iteration", "progress", 4, 6, "iteration 4 of at most 6", {}),
        ("Resumable", "iteration", "progress", 5, 6, "iteration 5 of at most 6", {}),
        ("Resumable", "done", "completed", 5, 6, "complete", {"stopped_by": "complete"}),
    ]
    assert [entry[1] for entry in checkpointer.log] == [4, 5]


def test_a_resumed_loop_still_respects_the_bound_counted_from_the_start() -> None:
    checkpointer = MemoryCheckpointer({"": (4, {"count": 4})})

    assert run(counting_loop(bound=5, target=99), checkpointer=checkpointer) == 5


# ----- perform_action -----------------------------------------------------------------------------


class Remember(BaseAgentAction):
    name = "remember"
    description = "Returns its arguments and the context it ran with."

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        return {"arguments": arguments, "context": context}


class ActingLoop(CountingLoop):
    registry = AgentActionRegistry.create(actions=[Remember()])
    target = 1

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        value = await self.perform_action(name="remember", arguments={"x": 1})
        return {"count": state["count"] + 1, "value": value}

    def build_result(self, *, state: Any) -> Any:
        return state["value"]


async def test_perform_action_runs_the_registry_action_with_the_loops_context() -> None:
    result = await InlineAgentRunner.create(runnable=ActingLoop, context="loop-context").request(input=None)

    assert result == {"arguments": {"x": 1}, "context": "loop-context"}


async def test_perform_action_takes_an_explicit_context_over_the_loops() -> None:
    loop = ActingLoop.create(context="loop-context")

    value = await loop.perform_action(name="remember", arguments={}, context="other")

    assert value == {"arguments": {}, "context": "other"}


async def test_perform_action_names_the_known_actions_when_asked_for_an_unknown_one() -> None:
    loop = ActingLoop.create(context=None)

    with pytest.raises(UnknownActionError, match="unknown action 'forget'; known actions: remember"):
        await loop.perform_action(name="forget", arguments={})


def test_a_loop_has_an_empty_registry_and_a_bound_of_ten_by_default() -> None:
    loop = CountingLoop.create(context=None)

    assert (len(loop.registry), BaseAgentLoop.max_iterations) == (0, 10)

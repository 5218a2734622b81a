"""The run scope's exported names, tested by name: ``RunScope``, ``CancelSignal``, ``Checkpointer``,
``new_run_id``, ``Runnable`` and ``ProgressCallback``, as a user reaches them through ``agentloop``.

The scope's clock is replaced by a fake one (``agentloop.loops.scope.time``), so the deadline's edge is
checked at exact instants, never by sleeping.
"""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace
from typing import Any

import pytest

from agentloop import (
    BaseAgentPipeline,
    CancellationToken,
    CancelSignal,
    Checkpointer,
    InlineAgentRunner,
    ProceduralAgentLoop,
    ProgressCallback,
    ProgressEvent,
    RunCancelledError,
    RunDeadlineExceededError,
    Runnable,
    RunScope,
    current_scope,
    new_run_id,
    use_scope,
)


class FakeClock:
    """``time.monotonic`` for ``agentloop.loops.scope``: it reads :attr:`now` and never moves by itself."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def scope_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr("agentloop.loops.scope.time", SimpleNamespace(monotonic=fake.monotonic))
    return fake


class Count(ProceduralAgentLoop):
    """Counts to ``input``, one per iteration."""

    max_iterations = 10

    def create_initial_state(self, *, input: Any) -> Any:
        return {"goal": input, "n": 0}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= state["goal"])

    def build_result(self, *, state: Any) -> Any:
        return state["n"]


# ----- RunScope ---------------------------------------------------------------------------------------


def test_a_child_scope_extends_the_path_and_shares_the_runs_deadline_cancel_and_checkpointer() -> None:
    token, saver = CancellationToken(), SavedCheckpoints()
    root = RunScope(run_id="r", deadline=5.0, cancel=token, checkpointer=saver)

    stage = root.child("pipeline/1")
    branch = stage.child("branch/a")

    assert (root.path, stage.path, branch.path) == ("", "pipeline/1", "pipeline/1/branch/a")
    assert {s.run_id for s in (stage, branch)} == {"r"}
    assert branch.deadline == 5.0 and branch.cancel is token and branch.checkpointer is saver


def test_a_run_scope_is_a_frozen_keyword_only_value() -> None:
    scope = RunScope(run_id="r")
    with pytest.raises(dataclasses.FrozenInstanceError):
        scope.path = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        RunScope("r")  # type: ignore[misc]
    assert (scope.path, scope.deadline, scope.cancel, scope.checkpointer) == ("", None, None, None)


def test_remaining_is_the_time_to_the_deadline_and_none_without_one(scope_clock: FakeClock) -> None:
    assert RunScope(run_id="r").remaining() is None
    scope = RunScope(run_id="r", deadline=scope_clock.now + 2.5)
    assert scope.remaining() == 2.5
    scope_clock.now += 3
    assert scope.remaining() == -0.5


def test_the_deadline_passes_at_its_instant_not_a_tick_before(scope_clock: FakeClock) -> None:
    scope = RunScope(run_id="r7", path="pipeline/0", deadline=scope_clock.now + 1)
    scope_clock.now += 0.999
    scope.check()  # just before: nothing
    scope_clock.now = scope.deadline or 0.0
    with pytest.raises(RunDeadlineExceededError) as passed:
        scope.check()
    assert (str(passed.value), passed.value.path) == ("run r7 passed its deadline", "pipeline/0")


def test_a_cancelled_run_is_reported_before_a_passed_deadline(scope_clock: FakeClock) -> None:
    token = CancellationToken()
    scope = RunScope(run_id="r8", path="branch/b", deadline=scope_clock.now - 1, cancel=token)
    token.cancel("stop")
    with pytest.raises(RunCancelledError) as stopped:
        scope.check()
    assert (str(stopped.value), stopped.value.path) == ("run r8 was cancelled", "branch/b")


def test_use_scope_makes_a_scope_current_for_its_block_only() -> None:
    scope = RunScope(run_id="outer")
    assert current_scope() is None
    with use_scope(scope) as inside:
        assert inside is scope and current_scope() is scope
        with use_scope(scope.child("x")):
            assert current_scope() == RunScope(run_id="outer", path="x")
        assert current_scope() is scope
    assert current_scope() is None


# ----- CancelSignal -------------------------------------------------------------------------------------


class CancelAfter:
    """A cancel signal of the user's own: says yes from its ``n``-th question on."""

    def __init__(self, n: int) -> None:
        self.n, self.asked = n, 0

    def is_cancelled(self) -> bool:
        self.asked += 1
        return self.asked >= self.n


def test_anything_with_is_cancelled_is_a_cancel_signal_and_the_runner_asks_it_before_each_iteration() -> None:
    signal = CancelAfter(3)
    assert isinstance(signal, CancelSignal) and isinstance(CancellationToken(), CancelSignal)
    assert not isinstance(object(), CancelSignal)
    seen: list[tuple[str, int]] = []

    with pytest.raises(RunCancelledError):
        InlineAgentRunner.create(runnable=Count).request_sync(
            input=5, cancel=signal, on_progress=lambda e: seen.append((e.phase, e.iteration))
        )

    # asked before iterations 1, 2 and 3: the third answer stops the run after two iterations
    assert signal.asked == 3
    assert seen == [("start", 0), ("iteration", 1), ("iteration", 2), ("cancelled", 2)]


# ----- Checkpointer -------------------------------------------------------------------------------------


class SavedCheckpoints:
    """A checkpointer of the user's own, in a dict keyed by the loop's path."""

    def __init__(self, saved: dict[str, tuple[int, Any]] | None = None) -> None:
        self.saved = dict(saved or {})
        self.loads: list[str] = []

    def load(self, *, path: str) -> tuple[int, Any] | None:
        self.loads.append(path)
        return self.saved.get(path)

    def save(self, *, path: str, iteration: int, state: Any) -> None:
        self.saved[path] = (iteration, state)


class TwoCounts(BaseAgentPipeline):
    stages = (Count, Count)


def test_a_checkpointer_given_to_the_runner_is_asked_per_loop_path_and_resumes_each_loop() -> None:
    saver = SavedCheckpoints({"pipeline/1": (2, {"goal": 3, "n": 2})})
    assert isinstance(saver, Checkpointer)
    assert not isinstance(CancelAfter(1), Checkpointer)

    result = InlineAgentRunner.create(runnable=TwoCounts).request_sync(input=3, checkpointer=saver)

    # stage 0 counted to 3 from scratch; stage 1 resumed at 2 of 3 and ran one iteration. An
    # iteration is saved before the next one starts: the last, which completes its loop, is not
    assert result == 3
    assert saver.loads == ["pipeline/0", "pipeline/1"]
    assert saver.saved == {"pipeline/0": (2, {"goal": 3, "n": 2}), "pipeline/1": (2, {"goal": 3, "n": 2})}


# ----- new_run_id, Runnable, ProgressCallback -------------------------------------------------------------


def test_new_run_id_is_32_hex_digits_and_fresh_each_time() -> None:
    ids = {new_run_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(re.fullmatch(r"[0-9a-f]{32}", run_id) for run_id in ids)


class Plain:
    """A runnable that derives from nothing of agentloop: ``create`` and ``run`` are the contract."""

    def __init__(self, context: Any) -> None:
        self.context = context

    @classmethod
    def create(cls, *, context: Any = None) -> Plain:
        return cls(context)

    async def run(self, *, input: Any, on_progress: ProgressCallback | None = None) -> Any:
        scope = current_scope()
        return {"input": input, "path": scope.path if scope else None, "context": self.context}


class PlainAfterCount(BaseAgentPipeline):
    stages = (Count, Plain)


def test_any_class_with_create_and_run_is_a_runnable_a_runner_and_a_pipeline_can_run() -> None:
    assert isinstance(Plain(None), Runnable) and not isinstance(object(), Runnable)

    alone = InlineAgentRunner.create(runnable=Plain, context="ctx").request_sync(input=1)
    staged = InlineAgentRunner.create(runnable=PlainAfterCount, context="ctx").request_sync(input=2)

    assert alone == {"input": 1, "path": "", "context": "ctx"}
    assert staged == {"input": 2, "path": "pipeline/1", "context": "ctx"}


async def test_a_progress_callback_may_be_a_function_or_a_coroutine_function() -> None:
    heard: list[str] = []

    def plain(event: ProgressEvent) -> None:
        heard.append(f"def {event.phase}")

    async def awaited(event: ProgressEvent) -> None:
        heard.append(f"async {event.phase}")

    callbacks: list[ProgressCallback] = [plain, awaited]
    for callback in callbacks:
        await InlineAgentRunner.create(runnable=Count).request(input=1, on_progress=callback)

    assert heard == ["def start", "def iteration", "def done", "async start", "async iteration", "async done"]

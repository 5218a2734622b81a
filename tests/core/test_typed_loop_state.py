"""A loop whose state is a pydantic model (``state_type``): every hook receives the model, a
checkpoint keeps its JSON, a loop resumed from that JSON gets the model back, and progress events
that carry it hold JSON. The same loop resumes on a real worker after SIGKILL in
``tests/integration/test_durable_loops.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from engine_support import run
from pydantic import BaseModel, Field

from agentloop.actions import StateNotSerializableError
from agentloop.loops import BaseAgentLoop, ProgressEvent, ProgressStatus
from agentloop.testing import ProgressRecorder


class Tally(BaseModel):
    goal: int
    seen: list[int] = Field(default_factory=list)


class TypedCount(BaseAgentLoop):
    """Counts to ``input``; records, per hook, the type of the state it received."""

    state_type = Tally
    max_iterations = 10

    def __init__(self, *, context: Any = None) -> None:
        super().__init__(context=context)
        self.received: list[tuple[str, str]] = []

    def create_initial_state(self, *, input: Any) -> Any:
        return {"goal": input}  # a dict: validated into a Tally

    def advance_state(self, *, state: Tally, iteration: int) -> Any:
        self.received.append(("advance_state", type(state).__name__))
        return state.model_copy(update={"seen": [*state.seen, iteration]})

    def is_complete(self, *, state: Tally, iteration: int) -> bool:
        self.received.append(("is_complete", type(state).__name__))
        return len(state.seen) >= state.goal

    def build_result(self, *, state: Tally) -> Any:
        self.received.append(("build_result", type(state).__name__))
        return state.seen

    def build_progress_event(self, *, state: Tally, iteration: int) -> ProgressEvent:
        self.received.append(("build_progress_event", type(state).__name__))
        return self.make_event(
            scope=self._scope,
            iteration=iteration,
            max_iterations=self.max_iterations,
            phase="iteration",
            status=ProgressStatus.PROGRESS,
            data={"state": state},
        )


class Checkpoints:
    def __init__(self, saved: dict[str, tuple[int, Any]] | None = None) -> None:
        self.saved: dict[str, tuple[int, Any]] = dict(saved or {})
        self.log: list[tuple[int, Any]] = []

    def load(self, *, path: str) -> tuple[int, Any] | None:
        return self.saved.get(path)

    def save(self, *, path: str, iteration: int, state: Any) -> None:
        self.log.append((iteration, state))
        self.saved[path] = (iteration, state)


def instance_runs(loop_cls: type[TypedCount], **options: Any) -> tuple[Any, list[tuple[str, str]]]:
    made: list[TypedCount] = []

    class Watched(loop_cls):  # type: ignore[valid-type,misc]
        @classmethod
        def create(cls, *, context: Any = None) -> Any:
            made.append(cls(context=context))
            return made[-1]

    result = run(Watched, **options)
    return result, made[0].received


def test_every_hook_receives_the_model_and_checkpoints_keep_its_json() -> None:
    checkpoints = Checkpoints()

    result, received = instance_runs(TypedCount, input=3, checkpointer=checkpoints)

    assert result == [0, 1, 2]
    assert {type_name for _, type_name in received} == {"Tally"}
    assert {hook for hook, _ in received} == {
        "advance_state",
        "is_complete",
        "build_result",
        "build_progress_event",
    }
    assert checkpoints.log == [(1, {"goal": 3, "seen": [0]}), (2, {"goal": 3, "seen": [0, 1]})]
    assert all(isinstance(state, dict) for _, state in checkpoints.log)


def test_a_loop_resumed_from_a_json_checkpoint_gets_the_model_back() -> None:
    checkpoints = Checkpoints({"": (2, {"goal": 4, "seen": [0, 1]})})
    recorder = ProgressRecorder()

    result, received = instance_runs(TypedCount, input=4, checkpointer=checkpoints, on_progress=recorder)

    assert result == [0, 1, 2, 3]
    assert {type_name for _, type_name in received} == {"Tally"}
    assert [(e.phase, e.iteration) for e in recorder.events][:1] == [("resume", 2)]
    assert checkpoints.log == [(3, {"goal": 4, "seen": [0, 1, 2]})]


def test_a_progress_event_carrying_the_model_holds_its_json() -> None:
    recorder = ProgressRecorder()

    run(TypedCount, input=2, on_progress=recorder)

    iterations = [e for e in recorder.events if e.phase == "iteration"]
    assert [e.to_dict()["data"] for e in iterations] == [
        {"state": {"goal": 2, "seen": [0]}},
        {"state": {"goal": 2, "seen": [0, 1]}},
    ]
    assert ProgressEvent.from_json(iterations[-1].to_json()) == iterations[-1]


def test_a_state_that_is_not_the_model_is_a_clear_error() -> None:
    class Broken(TypedCount):
        def advance_state(self, *, state: Tally, iteration: int) -> Any:
            return {"goal": "many"}

    with pytest.raises(StateNotSerializableError, match=r"from advance_state is not a valid Tally: goal: "):
        run(Broken, input=2)


def test_a_checkpoint_that_no_longer_fits_the_model_is_a_clear_error() -> None:
    checkpoints = Checkpoints({"": (1, {"seen": [0]})})  # saved before ``goal`` existed

    with pytest.raises(
        StateNotSerializableError, match=r"from a checkpoint is not a valid Tally: goal: Field"
    ):
        run(TypedCount, input=2, checkpointer=checkpoints)


def test_a_loop_without_a_state_type_keeps_its_state_as_it_is() -> None:
    class Plain(BaseAgentLoop):
        def create_initial_state(self, *, input: Any) -> Any:
            return {"n": 0}

        def advance_state(self, *, state: Any, iteration: int) -> Any:
            return {"n": state["n"] + 1}

        def is_complete(self, *, state: Any, iteration: int) -> bool:
            return bool(state["n"] >= 2)

        def build_result(self, *, state: Any) -> Any:
            return state

    checkpoints = Checkpoints()
    assert run(Plain, checkpointer=checkpoints) == {"n": 2}
    assert json.dumps(checkpoints.log) == '[[1, {"n": 1}]]'

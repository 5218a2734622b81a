"""Checkpoints: every finished iteration is saved before the next one starts (a loop that then
completes records its result instead), a loop that fails or is stopped saves its last one on the
way out, and a redelivered loop resumes after the last one."""

from __future__ import annotations

from typing import Any

import pytest
from engine_support import CountingLoop, counting_loop, run

from agentloop.actions.errors import RunCancelledError
from agentloop.testing import ProgressRecorder


class MemoryCheckpointer:
    def __init__(self, saved: dict[str, tuple[int, Any]] | None = None) -> None:
        self.saved: dict[str, tuple[int, Any]] = dict(saved or {})
        self.log: list[tuple[str, int, Any]] = []

    def load(self, *, path: str) -> tuple[int, Any] | None:
        return self.saved.get(path)

    def save(self, *, path: str, iteration: int, state: Any) -> None:
        self.log.append((path, iteration, state))
        self.saved[path] = (iteration, state)


def test_every_iteration_is_checkpointed_before_the_next_one_starts() -> None:
    checkpointer = MemoryCheckpointer()
    seen: list[tuple[int, list[int]]] = []

    class Watched(CountingLoop):
        target = 3

        def advance_state(self, *, state: Any, iteration: int) -> Any:
            seen.append((iteration, [entry[1] for entry in checkpointer.log]))
            return super().advance_state(state=state, iteration=iteration)

    assert run(Watched, checkpointer=checkpointer) == 3
    # iteration 3 completes the loop: its result supersedes a last checkpoint, which is not written
    assert checkpointer.log == [("", 1, {"count": 1}), ("", 2, {"count": 2})]
    assert seen == [(0, []), (1, [1]), (2, [1, 2])]


def test_a_loop_stopped_at_its_bound_writes_no_last_checkpoint() -> None:
    checkpointer = MemoryCheckpointer()

    assert run(counting_loop(bound=2, target=99), checkpointer=checkpointer) == 2
    assert [entry[1] for entry in checkpointer.log] == [1]


def failing_at_second_check(error: Exception) -> type[CountingLoop]:
    """A loop whose ``is_complete`` raises ``error`` after two finished iterations."""

    class Failing(CountingLoop):
        target = 99

        def is_complete(self, *, state: Any, iteration: int) -> bool:
            if iteration == 2:
                raise error
            return False

    return Failing


@pytest.mark.parametrize("error", [ValueError("judged badly"), RunCancelledError("cancelled")])
def test_a_failing_or_stopped_loop_saves_its_last_finished_iteration_on_the_way_out(error: Exception) -> None:
    checkpointer = MemoryCheckpointer()

    with pytest.raises(type(error)):
        run(failing_at_second_check(error), checkpointer=checkpointer)
    assert checkpointer.log == [("", 1, {"count": 1}), ("", 2, {"count": 2})]


def test_a_checkpoint_that_cannot_be_written_on_the_way_out_does_not_hide_the_error() -> None:
    class Broken(MemoryCheckpointer):
        def save(self, *, path: str, iteration: int, state: Any) -> None:
            if iteration == 2:
                raise ConnectionError("store away")
            super().save(path=path, iteration=iteration, state=state)

    checkpointer = Broken()
    with pytest.raises(ValueError, match="judged badly"):
        run(failing_at_second_check(ValueError("judged badly")), checkpointer=checkpointer)
    assert [entry[1] for entry in checkpointer.log] == [1]


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
    assert [entry[1] for entry in checkpointer.log] == [4]  # 5 completes it: its result is recorded


def test_a_resumed_loop_still_respects_the_bound_counted_from_the_start() -> None:
    checkpointer = MemoryCheckpointer({"": (4, {"count": 4})})

    assert run(counting_loop(bound=5, target=99), checkpointer=checkpointer) == 5

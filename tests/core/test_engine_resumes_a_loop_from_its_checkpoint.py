"""Checkpoints: every finished iteration is saved, and a redelivered loop resumes after the last one."""

from __future__ import annotations

from typing import Any

from engine_support import CountingLoop, counting_loop, run

from orchestration.testing import ProgressRecorder


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

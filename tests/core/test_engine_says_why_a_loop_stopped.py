"""The words of the engine's events when a loop compresses its context or is stopped from outside:
a passed deadline and a cancelled sibling read differently, and a compression is announced."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from agentloop.actions import BranchFailedError, RunDeadlineExceededError
from agentloop.loops import InlineAgentRunner, ProceduralAgentLoop
from agentloop.pipelines import BaseCompositeAgent, Branch
from agentloop.testing import ProgressRecorder


class Compressing(ProceduralAgentLoop):
    """Two iterations; compresses its state before the second."""

    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> Any:
        return {"n": 0, "result": None}

    def should_compress(self, *, state: Any, iteration: int) -> bool:
        return iteration == 1

    def compress_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "compressed": True}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "n": state["n"] + 1}


def test_a_compression_is_announced_between_iterations() -> None:
    recorder = ProgressRecorder()
    InlineAgentRunner.create(runnable=Compressing).request_sync(input=None, on_progress=recorder)

    assert [event[1:6] for event in recorder.transcript()[""]] == [
        ("start", "started", 0, 2, ""),
        ("iteration", "progress", 1, 2, "iteration 1 of at most 2"),
        ("compress", "progress", 1, 2, "compressed the working context"),
        ("iteration", "progress", 2, 2, "iteration 2 of at most 2"),
        ("done", "completed", 2, 2, "hit the iteration bound"),
    ]


class Waits(ProceduralAgentLoop):
    """A step that waits 60 s (only a deadline or a cancellation ends it), or fails at once."""

    def create_initial_state(self, *, input: Any) -> Any:
        return {"fail": input == "fail", "result": None}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        if state["fail"]:
            raise ValueError("this branch fails")
        await asyncio.sleep(60)
        return state


class Two(BaseCompositeAgent):
    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Waits, input=value, key=str(n)) for n, value in enumerate(input)]


def last_words(recorder: ProgressRecorder, path: str) -> tuple[str, str, str]:
    """The phase, status and message of the last event at ``path``."""
    _, phase, status, _, _, message, _ = recorder.transcript()[path][-1]
    return phase, status, message


async def test_a_step_ended_by_the_deadline_says_the_run_passed_its_deadline() -> None:
    recorder = ProgressRecorder()
    with pytest.raises(RunDeadlineExceededError):
        await InlineAgentRunner.create(runnable=Two).request(
            input=["wait"], on_progress=recorder, deadline=timedelta(seconds=0.1)
        )
    assert last_words(recorder, "branch/0") == ("deadline_exceeded", "failed", "the run passed its deadline")


async def test_a_step_ended_by_a_failing_sibling_says_the_run_was_cancelled() -> None:
    recorder = ProgressRecorder()
    with pytest.raises(BranchFailedError):
        await InlineAgentRunner.create(runnable=Two).request(input=["wait", "fail"], on_progress=recorder)
    assert last_words(recorder, "branch/0") == ("cancelled", "failed", "the run was cancelled")
    assert last_words(recorder, "branch/1") == ("error", "failed", "ValueError: this branch fails")

"""Workflows of the durability tests (imported by worker processes too)."""

from __future__ import annotations

import os
import time
from typing import Any

from pydantic import BaseModel

from actions import Usage, check_budget, report_usage
from loops import BaseAgentLoop
from orchestration.registry import register


class SlowCount(BaseAgentLoop):
    """Counts to ``input`` slowly; every iteration appends one line to the file named in
    the context, so a test can see which iterations ran (and in which process)."""

    max_iterations = 50

    def create_initial_state(self, *, input: Any) -> Any:
        return {"goal": input, "n": 0}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        time.sleep(float(self.context.get("step_seconds", 0.25)))
        log = self.context.get("log")
        if log:
            with open(log, "a") as handle:
                handle.write(f"{iteration} {os.getpid()}\n")
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= state["goal"])

    def build_result(self, *, state: Any) -> Any:
        return {"counted": state["n"]}


class Metered(SlowCount):
    """Reports 10 input and 2 output tokens per iteration, as a model step would; iteration
    ``fail_at`` (context) fails after its call."""

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        check_budget()
        report_usage(Usage(input_tokens=10, output_tokens=2))
        if iteration == self.context.get("fail_at"):
            raise RuntimeError(f"iteration {iteration} failed after its model call")
        return {**state, "n": state["n"] + 1}


class NotJsonState(SlowCount):
    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "n": state["n"] + 1, "seen": {1, 2}}


class CountState(BaseModel):
    goal: int
    n: int = 0


class TypedSlowCount(SlowCount):
    """:class:`SlowCount` with its state declared as a pydantic model: its hooks refuse anything else."""

    state_type = CountState

    def create_initial_state(self, *, input: Any) -> Any:
        return CountState(goal=input)

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        assert isinstance(state, CountState), type(state)
        counted = super().advance_state(state=state.model_dump(), iteration=iteration)
        return CountState.model_validate(counted)

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        assert isinstance(state, CountState), type(state)
        return state.n >= state.goal

    def build_result(self, *, state: Any) -> Any:
        assert isinstance(state, CountState), type(state)
        return {"counted": state.n}


register("durable.slow_count", SlowCount)
register("durable.typed_slow_count", TypedSlowCount)
register("durable.not_json_state", NotJsonState)
register("durable.metered", Metered)

"""Workflows of the durability tests, imported by the test process and by real workers."""

from __future__ import annotations

import time
from typing import Any

from agentloop.loops import BaseAgentLoop
from agentloop.orchestration.registry import register
from agentloop.pipelines import BaseAgentPipeline, BaseCompositeAgent, Branch


class Count(BaseAgentLoop):
    """Counts to ``input`` (an int), sleeping ``step_seconds`` (context, default 0.1) per step."""

    max_iterations = 100

    def create_initial_state(self, *, input: Any) -> Any:
        return {"goal": input, "n": 0}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        time.sleep(float((self.context or {}).get("step_seconds", 0.1)))
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= state["goal"])

    def build_result(self, *, state: Any) -> Any:
        return {"counted": state["n"]}


class Other(Count):
    """Another workflow, whose result says so."""

    def build_result(self, *, state: Any) -> Any:
        return {"other": state["n"]}


class FailAfter(Count):
    """Fails once it has counted to ``input``."""

    def build_result(self, *, state: Any) -> Any:
        raise ValueError(f"failed after {state['n']} steps")


class SetResult(Count):
    """Finishes with a result JSON cannot carry: its task fails after the loop, outside the engine."""

    def build_result(self, *, state: Any) -> Any:
        return {"seen": {1, 2}}


class TwoCounts(BaseAgentPipeline):
    """Two counting stages; the second counts to the first's count plus one."""

    stages = (Count, Count)

    def build_stage_input(self, *, index: int, previous_output: Any, input: Any) -> Any:
        return input if index == 0 else previous_output["counted"] + 1


class Connect(Count):
    """Fails as a driver does, quoting what it was given: ``could not connect to <input>``."""

    def build_result(self, *, state: Any) -> Any:
        raise ConnectionError(f"could not connect to {state['goal']!r}")

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return True


class Pair(BaseCompositeAgent):
    """Two counts side by side; the merge sums them."""

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Count, input=input, key=key) for key in ("a", "b")]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return sum(result.output["counted"] for result in results)


register("durability.count", Count)
register("durability.connect", Connect)
register("durability.pair", Pair)
register("durability.other", Other)
register("durability.fail_after", FailAfter)
register("durability.set_result", SetResult)
register("durability.two_counts", TwoCounts)

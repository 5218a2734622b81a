"""Workflows of the parity suite, registered by name for the inline and Celery runs.

Imported by the test process and, through ``AGENTLOOP_IMPORTS``, by real
worker processes, so both register the same names.
"""

from __future__ import annotations

import time
from typing import Any

from loops import BaseAgentLoop
from orchestration.registry import register
from pipelines import BaseAgentPipeline, BaseCompositeAgent, Branch, BranchResult, FailurePolicy


class CountTo(BaseAgentLoop):
    """Counts from the input up to ``input + 3``."""

    max_iterations = 10

    def create_initial_state(self, *, input: Any) -> Any:
        return {"start": input, "n": input}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= state["start"] + 3)

    def build_result(self, *, state: Any) -> Any:
        return state["n"]


class Bounded(CountTo):
    """Never completes on its own: the bound of 3 ends it."""

    max_iterations = 3

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return False

    def build_bounded_result(self, *, state: Any) -> Any:
        return {"bound_hit": True, "best": state["n"]}


class Explode(CountTo):
    """Fails in its second iteration."""

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        if iteration == 1:
            raise ValueError(f"exploded at {state['n']}")
        return {**state, "n": state["n"] + 1}


class Slow(CountTo):
    """A long loop that sleeps between steps, to be cancelled."""

    max_iterations = 400

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        time.sleep(0.02)
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return False


class ThreeStages(BaseAgentPipeline):
    stages = (CountTo, CountTo, CountTo)

    def build_stage_input(self, *, index: int, previous_output: Any, input: Any) -> Any:
        return previous_output * 2 if index == 2 else previous_output


class Fan(BaseCompositeAgent):
    """One CountTo per item of the input list; sums the results."""

    branch_runnables = (CountTo,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=CountTo, input=value, key=str(i)) for i, value in enumerate(input)]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return {"total": sum(r.output for r in results), "keys": [r.key for r in results]}


class Widths(CountTo):
    """A first stage whose output decides the next stage's width: ``[0, 1, ..., n-1]``."""

    def build_result(self, *, state: Any) -> Any:
        return list(range(state["n"] - state["start"] + state["start"] % 5))


class FanAfterStage(BaseAgentPipeline):
    stages = (Widths, Fan)


class PipelineBranch(BaseAgentPipeline):
    stages = (CountTo, CountTo)


class FanOfPipelines(BaseCompositeAgent):
    branch_runnables = (PipelineBranch,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=PipelineBranch, input=i * 10, key=f"p{i}") for i in range(input)]


class MixedFan(BaseCompositeAgent):
    """Branch ``bad`` fails; the others succeed."""

    branch_runnables = (CountTo, Explode, PipelineBranch)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [
            Branch(runnable=CountTo, input=1, key="good"),
            Branch(runnable=Explode, input=2, key="bad"),
            Branch(runnable=PipelineBranch, input=3, key="nested"),
        ]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [r.to_dict() for r in results]


class CollectingFan(MixedFan):
    failure_policy = FailurePolicy.COLLECT


class FailFastFan(MixedFan):
    failure_policy = FailurePolicy.FAIL_FAST


class PipelineOverFailFast(BaseAgentPipeline):
    stages = (CountTo, FailFastFan)


class SlowFan(BaseCompositeAgent):
    branch_runnables = (Slow,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Slow, input=i, key=str(i)) for i in range(input)]


def merged_outputs(results: list[BranchResult]) -> list[Any]:
    return [r.output for r in results]


WORKFLOWS: dict[str, type] = {
    "parity.count": CountTo,
    "parity.bounded": Bounded,
    "parity.three_stages": ThreeStages,
    "parity.fan": Fan,
    "parity.fan_after_stage": FanAfterStage,
    "parity.fan_of_pipelines": FanOfPipelines,
    "parity.collecting_fan": CollectingFan,
    "parity.fail_fast_fan": FailFastFan,
    "parity.pipeline_over_fail_fast": PipelineOverFailFast,
    "parity.slow_fan": SlowFan,
}

for _name, _cls in WORKFLOWS.items():
    register(_name, _cls)


class SlowShort(Slow):
    max_iterations = 10

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= state["start"] + 6)


class SlowFanShort(BaseCompositeAgent):
    failure_policy = FailurePolicy.COLLECT
    branch_runnables = (SlowShort,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=SlowShort, input=i, key=str(i)) for i in range(input)]


register("parity.slow_fan_short", SlowFanShort)

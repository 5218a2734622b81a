"""Workflows whose next message would be refused at the workers' edge (``edge.py``): a branch input
nested too deep or too large, a stage output nested too deep, later stages that carry a large
input; and outputs nested exactly as deep as may be handed on.

Imported by the test process and, through ``AGENTLOOP_IMPORTS``, by real worker processes.
"""

from __future__ import annotations

from typing import Any

from agentloop.loops import BaseAgentLoop
from agentloop.orchestration.celery_adapter.edge import MAX_BODY_BYTES, MAX_DEPTH
from agentloop.orchestration.celery_adapter.outgoing import MAX_OUTPUT_DEPTH
from agentloop.orchestration.registry import register
from agentloop.pipelines import BaseAgentPipeline, BaseCompositeAgent, Branch


def nested(depth: int) -> Any:
    """A value of ``depth`` levels of lists, ``0`` inside."""
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


class Echo(BaseAgentLoop):
    """Returns its input after one step."""

    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> Any:
        return {"done": False}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {"done": True}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["done"])

    def build_result(self, *, state: Any) -> Any:
        return "echo"


class DeepOutput(Echo):
    """Returns a value nested deeper than a message's args may be."""

    def build_result(self, *, state: Any) -> Any:
        return nested(MAX_DEPTH + 5)


class DeepBranch(BaseCompositeAgent):
    """Two branches; the second one's input is nested deeper than a message's args may be."""

    branch_runnables = (Echo,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [
            Branch(runnable=Echo, input=1, key="a"),
            Branch(runnable=Echo, input=nested(MAX_DEPTH + 5), key="b"),
        ]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [r.output for r in results]


class BigBranch(DeepBranch):
    """Two branches; the second one's input is larger than a message may be."""

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [
            Branch(runnable=Echo, input=1, key="a"),
            Branch(runnable=Echo, input="x" * MAX_BODY_BYTES, key="b"),
        ]


class DeepOutputThenEcho(BaseAgentPipeline):
    stages = (DeepOutput, Echo)


def depth(value: Any) -> int:
    """How many levels of lists ``value`` nests."""
    levels = 0
    while isinstance(value, list):
        levels, value = levels + 1, value[0]
    return levels


class AtTheLimit(Echo):
    """Returns a value nested exactly :data:`MAX_OUTPUT_DEPTH` levels deep."""

    def build_result(self, *, state: Any) -> Any:
        return nested(MAX_OUTPUT_DEPTH)


class PastTheLimit(Echo):
    """Returns a value nested one level deeper than :data:`MAX_OUTPUT_DEPTH`."""

    def build_result(self, *, state: Any) -> Any:
        return nested(MAX_OUTPUT_DEPTH + 1)


class Depth(Echo):
    """Returns how deep its input nests."""

    def create_initial_state(self, *, input: Any) -> Any:
        return {"done": False, "depth": depth(input)}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "done": True}

    def build_result(self, *, state: Any) -> Any:
        return state["depth"]


class OutputAtTheLimit(BaseAgentPipeline):
    stages = (AtTheLimit, Depth)


class OutputPastTheLimit(BaseAgentPipeline):
    stages = (PastTheLimit, Depth)


class LanesOfOutputsAtTheLimit(BaseCompositeAgent):
    """Three branches in two lanes: the merge gets lists of lanes' lists of outputs at the limit."""

    branch_runnables = (AtTheLimit,)
    max_concurrency = 2

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=AtTheLimit, input=i, key=str(i)) for i in range(3)]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [depth(r.output) for r in results]


class CarryingPipeline(BaseAgentPipeline):
    """Three stages, each reading the pipeline's input: every stage's message carries it (a task
    per stage: stages sharing one task carry it in one message, which may pass)."""

    pack_size = 1

    stages = (Echo, Echo, Echo)

    def build_stage_input(self, *, index: int, previous_output: Any, input: Any) -> Any:
        return {"previous": previous_output, "input_chars": len(input)}


class ThirdOfALimit(Echo):
    """Returns a string of a third of :data:`MAX_BODY_BYTES`: alone it may be handed on."""

    def build_result(self, *, state: Any) -> Any:
        return "x" * (MAX_BODY_BYTES // 3)


class BigPack(BaseCompositeAgent):
    """``input`` branches in one pack, each output a third of a message's limit: alone each may
    travel; three or more together may not."""

    branch_runnables = (ThirdOfALimit,)
    pack_size = 4

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=ThirdOfALimit, input=i, key=str(i)) for i in range(input)]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return [len(r.output) for r in results]


register("outgoing.deep_branch", DeepBranch)
register("outgoing.big_branch", BigBranch)
register("outgoing.deep_output", DeepOutputThenEcho)
register("outgoing.output_at_the_limit", OutputAtTheLimit)
register("outgoing.output_past_the_limit", OutputPastTheLimit)
register("outgoing.lanes_at_the_limit", LanesOfOutputsAtTheLimit)
register("outgoing.carrying_pipeline", CarryingPipeline)
register("outgoing.big_pack", BigPack)

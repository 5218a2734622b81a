"""Workflows whose next message would be refused at the workers' edge (``edge.py``): a branch input
nested too deep or too large, and a stage output nested too deep.

Imported by the test process and, through ``AGENTLOOP_IMPORTS``, by real worker processes.
"""

from __future__ import annotations

from typing import Any

from agentloop.loops import BaseAgentLoop
from agentloop.orchestration.celery_adapter.edge import MAX_BODY_BYTES, MAX_DEPTH
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


register("outgoing.deep_branch", DeepBranch)
register("outgoing.big_branch", BigBranch)
register("outgoing.deep_output", DeepOutputThenEcho)

"""Workflows the edge tests run on their worker (``AGENTLOOP_IMPORTS=edge_workflows``)."""

from __future__ import annotations

from typing import Any

from agentloop import BaseAgentLoop, BaseAgentPipeline, register


@register("edge.echo")
class Echo(BaseAgentLoop):
    """Returns its input after one iteration."""

    max_iterations = 1

    def create_initial_state(self, *, input: Any) -> Any:
        return {"input": input}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return state

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return True

    def build_result(self, *, state: Any) -> Any:
        return state["input"]


@register("edge.two_echoes")
class TwoEchoes(BaseAgentPipeline):
    """A pipeline: its launch replaces itself with a chain (Celery's ``Ignore``)."""

    stages = (Echo, Echo)

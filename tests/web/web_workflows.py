"""Workflows the web tests start: quick ones, and a composite whose branches wait at a gate.

``web.gated`` fans out one :class:`GatedStep` per key; each branch takes one
step, then waits (up to 60 s) until the file named by the input's ``gate``
exists, then finishes. A test (or a browser test) sees every branch running,
opens the gate, and sees them done.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from agentloop.loops import BaseAgentLoop
from agentloop.orchestration.registry import register
from agentloop.pipelines import BaseAgentPipeline, BaseCompositeAgent, Branch, FailurePolicy

GATE_WAIT_SECONDS = 60.0


class GatedStep(BaseAgentLoop):
    """Three iterations; the second waits for the gate file."""

    max_iterations = 3

    def create_initial_state(self, *, input: Any) -> Any:
        return {"gate": input["gate"], "key": input["key"], "n": 0}

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        if iteration == 1:  # waits on the event loop, so the step's progress is written meanwhile
            deadline = time.monotonic() + GATE_WAIT_SECONDS
            gate = Path(state["gate"])
            while not await asyncio.to_thread(gate.exists) and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= 3)

    def build_result(self, *, state: Any) -> Any:
        return {"key": state["key"], "steps": state["n"]}


class GatedFan(BaseCompositeAgent):
    """One :class:`GatedStep` per key of ``input["keys"]``, all behind ``input["gate"]``."""

    branch_runnables = (GatedStep,)
    failure_policy = FailurePolicy.COLLECT
    max_concurrency = 8

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [
            Branch(runnable=GatedStep, input={"gate": input["gate"], "key": key}, key=key)
            for key in input["keys"]
        ]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return {"done": [result.key for result in results if result.ok]}


class Tally(BaseAgentLoop):
    """Counts the merged keys in one iteration."""

    max_iterations = 1

    def create_initial_state(self, *, input: Any) -> Any:
        return {"done": input["done"], "count": None}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "count": len(state["done"])}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return state["count"] is not None

    def build_result(self, *, state: Any) -> Any:
        return {"count": state["count"], "done": state["done"]}


class GatedWorkflow(BaseAgentPipeline):
    """The gated fan-out, then a tally stage."""

    stages = (GatedFan, Tally)


class Echo(BaseAgentLoop):
    """Returns its input after two iterations."""

    max_iterations = 5

    def create_initial_state(self, *, input: Any) -> Any:
        return {"input": input, "n": 0}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= 2)

    def build_result(self, *, state: Any) -> Any:
        return {"echo": state["input"]}


register("web.gated", GatedWorkflow)
register("web.echo", Echo)

"""Workflows the rolling-deploy tests run (``AGENTLOOP_IMPORTS=deploy_workflows``).

Each step says which worker ran it: a prefork pool child's parent is the worker's main process,
whose pid the test knows.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from agentloop import BaseAgentLoop, BaseAgentPipeline, BaseCompositeAgent, Branch, register

#: How long a gated step waits for its gate before it gives up (a ceiling, never a verdict).
GATE_CEILING_SECONDS = 120.0


class _OneStep(BaseAgentLoop):
    max_iterations = 1

    def create_initial_state(self, *, input: Any) -> Any:
        return {"input": input}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return "worker" in state


@register("deploy.gated")
class Gated(_OneStep):
    """Touches ``input["started"]``, waits for the file ``input["gate"]``, says whose worker ran it."""

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        Path(state["input"]["started"]).touch()
        gate, deadline = Path(state["input"]["gate"]), time.monotonic() + GATE_CEILING_SECONDS
        while not gate.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the gate {gate} never opened")
            time.sleep(0.05)
        return {**state, "worker": os.getppid()}

    def build_result(self, *, state: Any) -> Any:
        return {"first": state["worker"]}


@register("deploy.whose")
class Whose(_OneStep):
    """Adds the worker that ran it to its input (an object) as ``second``."""

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "worker": os.getppid()}

    def build_result(self, *, state: Any) -> Any:
        return {**state["input"], "second": state["worker"]}


@register("deploy.two_steps")
class TwoSteps(BaseAgentPipeline):
    """A gated step, then a step on whichever worker takes the next message."""

    stages = (Gated, Whose)


@register("deploy.awaits")
class Awaits(_OneStep):
    """Awaits (a branch the packing rule packs) and says whose worker ran it."""

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        await asyncio.sleep(0.01)
        return {**state, "worker": os.getppid()}

    def build_result(self, *, state: Any) -> Any:
        return state["worker"]


@register("deploy.fan")
class Fan(BaseCompositeAgent):
    """``input["width"]`` awaiting branches, none bound: packed by default; the workers that ran them."""

    branch_runnables = (Awaits,)
    max_concurrency = None

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=Awaits, input=index, key=str(index)) for index in range(input["width"])]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return sorted({result.output for result in results})


@register("deploy.appends")
class Appends(_OneStep):
    """Appends the worker that ran it to its input (a list)."""

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {**state, "worker": os.getppid()}

    def build_result(self, *, state: Any) -> Any:
        return [*state["input"], state["worker"]]


class OneAppend(BaseAgentPipeline):
    """A pipeline of one stage: as a stage of another, it expands (a task of its own)."""

    stages = (Appends,)


@register("deploy.stages")
class Stages(BaseAgentPipeline):
    """A stage that expands, then three loop stages, one ``agentloop.stages`` task by default (the
    launch would run them itself were they first): the workers that ran the four."""

    stages = (OneAppend, Appends, Appends, Appends)

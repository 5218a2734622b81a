"""Workflows of the operations tests (Flower, privacy), registered by name.

Imported by real worker and Flower processes through ``AGENTLOOP_IMPORTS``.
Their inputs are dicts that carry a secret; the secret travels through the
stages (so it is in task arguments and intermediate results) but never
reaches the final result, which a client legitimately reads.
"""

from __future__ import annotations

import json
import time
from typing import Any

from agentloop.loops import BaseAgentLoop
from agentloop.orchestration.registry import register
from agentloop.pipelines import BaseAgentPipeline


class Carry(BaseAgentLoop):
    """Slowly counts ``input["steps"]`` steps; its result carries the whole input on."""

    max_iterations = 50

    def create_initial_state(self, *, input: Any) -> Any:
        return {"input": input, "n": 0}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        time.sleep(float(state["input"].get("delay", 0.1)))
        return {**state, "n": state["n"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["n"] >= int(state["input"].get("steps", 3)))

    def build_result(self, *, state: Any) -> Any:
        return {"carried": state["input"], "steps": state["n"]}


class Summarize(Carry):
    """Counts the same steps over the carried input; its result keeps sizes only."""

    def create_initial_state(self, *, input: Any) -> Any:
        return {"input": input["carried"], "n": 0}

    def build_result(self, *, state: Any) -> Any:
        return {"steps": state["n"], "input_chars": len(json.dumps(state["input"]))}


class CarryThenSummarize(BaseAgentPipeline):
    """Stage 0's output (and so stage 1's argument) holds the secret; the run's result does not.
    A task per stage (``pack_size = 1``), so the secret travels in a message between them."""

    stages = (Carry, Summarize)
    pack_size = 1


class Leaky(BaseAgentLoop):
    """Fails with an exception whose message quotes the whole input."""

    max_iterations = 3

    def create_initial_state(self, *, input: Any) -> Any:
        return {"input": input}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        raise ValueError(f"cannot handle {state['input']!r}")

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return False

    def build_result(self, *, state: Any) -> Any:
        return None


register("ops.carry_then_summarize", CarryThenSummarize)
register("ops.leaky", Leaky)

"""Workflows of the branch-limit test on two worker processes, registered by name.

Imported by the test process and, through ``AGENTLOOP_IMPORTS``, by real worker processes. Each
branch counts itself in a private Redis (the branches inside their step now, each count seen on
entering, each branch's entries) and waits for a release token the test pushes, so the test counts
the branches in flight across both workers.
"""

from __future__ import annotations

from typing import Any

import redis

from agentloop.loops import ProceduralAgentLoop
from agentloop.orchestration.fairness.rules import Concurrency
from agentloop.orchestration.registry import register
from agentloop.pipelines import BaseCompositeAgent, Branch

WIDTH = 8
BRANCH_LIMIT = 2


class Counted(ProceduralAgentLoop):
    """Input ``{"redis": url, "ns": namespace, "name": branch}``: counted while inside its step."""

    max_iterations = 2

    def create_initial_state(self, *, input: Any) -> Any:
        return {**input, "done": False}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        client = redis.Redis.from_url(state["redis"])
        ns = state["ns"]
        try:
            client.rpush(f"{ns}:seen", client.incr(f"{ns}:inside"))
            client.hincrby(f"{ns}:entries", state["name"], 1)
            if client.blpop([f"{ns}:release"], timeout=60) is None:
                raise TimeoutError("the test never released the step")
        finally:
            client.decr(f"{ns}:inside")
            client.close()
        return {**state, "done": True}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["done"])

    def build_result(self, *, state: Any) -> Any:
        return state["name"]


class CountedFan(BaseCompositeAgent):
    """``WIDTH`` counted branches, one task each."""

    branch_runnables = (Counted,)
    pack_size = 1

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [
            Branch(runnable=Counted, input={**input, "name": f"{input['run']}/{n}"}, key=str(n))
            for n in range(WIDTH)
        ]


register("branch_limits.fan", CountedFan, concurrency=Concurrency(branch_limit=BRANCH_LIMIT))

"""Runnables that say which event loop their task runs them on (``test_task_loops.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

from agentloop import BaseAgentLoop, BaseCompositeAgent, Branch, register

LOOP_KIND = "tests.loop_kind"
FAN = "tests.loop_kind_fan"


def loop_kind() -> str:
    """``uvloop`` or ``asyncio``: the package of the running event loop's class."""
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


@register(LOOP_KIND)
class LoopKind(BaseAgentLoop):
    """One iteration; its result is the kind of loop that iteration ran on."""

    max_iterations = 1

    def create_initial_state(self, *, input: Any) -> dict[str, str]:
        return {"kind": ""}

    async def advance_state(self, *, state: dict[str, str], iteration: int) -> dict[str, str]:
        return {"kind": loop_kind()}

    def is_complete(self, *, state: dict[str, str], iteration: int) -> bool:
        return bool(state["kind"])

    def build_result(self, *, state: dict[str, str]) -> str:
        return state["kind"]


@register(FAN)
class LoopKindFan(BaseCompositeAgent):
    """``input`` :class:`LoopKind` branches (packed by the rule); the kinds they ran on."""

    branch_runnables = (LoopKind,)

    def build_branches(self, *, input: Any) -> list[Branch]:
        return [Branch(runnable=LoopKind, input=None, key=str(i)) for i in range(int(input))]

    def merge_results(self, *, results: Any, input: Any) -> Any:
        return sorted({str(result.output) for result in results if result.ok})

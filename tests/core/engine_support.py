"""What the tests of the loop engine share: a loop that counts to a target, and a way to run one."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import settings

from agentloop.loops import BaseAgentLoop, InlineAgentRunner

FAST = settings(max_examples=40, deadline=None)


class CountingLoop(BaseAgentLoop):
    """Counts up by one per iteration; complete once the count reaches ``target``."""

    max_iterations = 10
    target = 3

    def create_initial_state(self, *, input: Any) -> Any:
        return {"count": 0}

    def advance_state(self, *, state: Any, iteration: int) -> Any:
        return {"count": state["count"] + 1}

    def is_complete(self, *, state: Any, iteration: int) -> bool:
        return bool(state["count"] >= self.target)

    def build_result(self, *, state: Any) -> Any:
        return state["count"]


def counting_loop(*, bound: int, target: int) -> type[CountingLoop]:
    return type("CountingLoop", (CountingLoop,), {"max_iterations": bound, "target": target})


def run(loop_cls: type[Any], *, input: Any = None, **options: Any) -> Any:
    return asyncio.run(InlineAgentRunner.create(runnable=loop_cls).request(input=input, **options))

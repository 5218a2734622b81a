"""``perform_action``: a loop runs an action of its registry with its own context or an explicit one."""

from __future__ import annotations

from typing import Any

import pytest
from engine_support import CountingLoop

from agentloop.actions import AgentActionRegistry, BaseAgentAction, UnknownActionError
from agentloop.loops import BaseAgentLoop, InlineAgentRunner


class Remember(BaseAgentAction):
    name = "remember"
    description = "Returns its arguments and the context it ran with."

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        return {"arguments": arguments, "context": context}


class ActingLoop(CountingLoop):
    registry = AgentActionRegistry.create(actions=[Remember()])
    target = 1

    async def advance_state(self, *, state: Any, iteration: int) -> Any:
        value = await self.perform_action(name="remember", arguments={"x": 1})
        return {"count": state["count"] + 1, "value": value}

    def build_result(self, *, state: Any) -> Any:
        return state["value"]


async def test_perform_action_runs_the_registry_action_with_the_loops_context() -> None:
    result = await InlineAgentRunner.create(runnable=ActingLoop, context="loop-context").request(input=None)

    assert result == {"arguments": {"x": 1}, "context": "loop-context"}


async def test_perform_action_takes_an_explicit_context_over_the_loops() -> None:
    loop = ActingLoop.create(context="loop-context")

    value = await loop.perform_action(name="remember", arguments={}, context="other")

    assert value == {"arguments": {}, "context": "other"}


async def test_perform_action_names_the_known_actions_when_asked_for_an_unknown_one() -> None:
    loop = ActingLoop.create(context=None)

    with pytest.raises(UnknownActionError, match="unknown action 'forget'; known actions: remember"):
        await loop.perform_action(name="forget", arguments={})


def test_a_loop_has_an_empty_registry_and_a_bound_of_ten_by_default() -> None:
    loop = CountingLoop.create(context=None)

    assert (len(loop.registry), BaseAgentLoop.max_iterations) == (0, 10)

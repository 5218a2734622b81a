"""Actions and the registry a loop performs them from."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop.actions import AgentActionRegistry, AgentLoopError, BaseAgentAction, UnknownActionError


class Add(BaseAgentAction):
    name = "add"
    description = "Adds two numbers."

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        }

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        return arguments["a"] + arguments["b"]


class Noop(BaseAgentAction):
    name = "noop"
    description = "Does nothing."

    def __init__(self, *, label: str = "") -> None:
        self.label = label

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        return None


def test_a_registry_finds_its_actions_by_name() -> None:
    add, noop = Add(), Noop()
    registry = AgentActionRegistry.create(actions=[add, noop])

    assert registry.get("add") is add
    assert registry.get("noop") is noop
    assert registry.names == ("add", "noop")
    assert "add" in registry
    assert "sub" not in registry
    assert list(registry) == [add, noop]
    assert len(registry) == 2


def test_an_empty_registry_is_allowed() -> None:
    registry = AgentActionRegistry.create()

    assert (registry.names, len(registry), "add" in registry) == ((), 0, False)


def test_a_duplicate_action_name_fails_when_the_registry_is_created() -> None:
    with pytest.raises(ValueError, match="duplicate action name 'noop'"):
        AgentActionRegistry.create(actions=[Noop(), Add(), Noop(label="again")])


def test_an_unknown_name_is_an_error_that_lists_the_known_names() -> None:
    registry = AgentActionRegistry.create(actions=[Noop(), Add()])

    with pytest.raises(UnknownActionError) as caught:
        registry.get("multiply")

    assert str(caught.value) == "unknown action 'multiply'; known actions: add, noop"
    assert (caught.value.name, caught.value.known) == ("multiply", ("add", "noop"))
    assert isinstance(caught.value, AgentLoopError)
    assert isinstance(caught.value, KeyError)


def test_an_unknown_name_in_an_empty_registry_says_there_are_none() -> None:
    with pytest.raises(UnknownActionError, match=r"known actions: \(none\)"):
        AgentActionRegistry.create().get("x")


def test_a_registry_holds_only_named_actions() -> None:
    class Nameless(Noop):
        name = ""

    with pytest.raises(ValueError, match="has no name"):
        AgentActionRegistry.create(actions=[Nameless()])
    with pytest.raises(TypeError, match="not an action"):
        AgentActionRegistry.create(actions=["add"])  # type: ignore[list-item]


def test_an_action_is_created_by_its_factory_with_keyword_arguments() -> None:
    action = Noop.create(label="mine")

    assert isinstance(action, Noop)
    assert action.label == "mine"


def test_an_action_offers_itself_as_a_tool_with_no_arguments_by_default() -> None:
    assert Noop().as_tool() == {
        "name": "noop",
        "description": "Does nothing.",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    }
    assert Add().as_tool()["parameters"]["required"] == ["a", "b"]


def test_the_default_parameters_cannot_be_changed_through_one_action() -> None:
    Noop().parameters["properties"]["leak"] = {"type": "string"}

    assert Noop().parameters["properties"] == {}


async def test_an_action_keeps_the_contract(agentloop_contract: Any) -> None:
    assert await agentloop_contract.check_action(Add(), arguments={"a": 1, "b": 2}) == 3
    assert await agentloop_contract.check_action(Noop(), arguments={}) is None

"""``AgentActionRegistry``: the actions a loop may perform, by name."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Self

from agentloop.actions.base import BaseAgentAction
from agentloop.actions.errors import UnknownActionError


class AgentActionRegistry:
    """An immutable name -> action map. Duplicate names fail at creation."""

    __slots__ = ("_actions",)

    def __init__(self, actions: Iterable[BaseAgentAction] = ()) -> None:
        table: dict[str, BaseAgentAction] = {}
        for action in actions:
            if not isinstance(action, BaseAgentAction):
                raise TypeError(f"not an action: {action!r}")
            if not action.name:
                raise ValueError(f"action {type(action).__name__} has no name")
            if action.name in table:
                raise ValueError(f"duplicate action name {action.name!r}")
            table[action.name] = action
        self._actions = table

    @classmethod
    def create(cls, *, actions: Iterable[BaseAgentAction] = ()) -> Self:
        return cls(actions)

    def get(self, name: str) -> BaseAgentAction:
        try:
            return self._actions[name]
        except KeyError:
            raise UnknownActionError(name, self._actions) from None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._actions)

    def __contains__(self, name: object) -> bool:
        return name in self._actions

    def __iter__(self) -> Iterator[BaseAgentAction]:
        return iter(self._actions.values())

    def __len__(self) -> int:
        return len(self._actions)

    def __repr__(self) -> str:
        return f"AgentActionRegistry({list(self._actions)})"

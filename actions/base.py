"""``BaseAgentAction``: one step of an agent, code or one forced model call."""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import Any, Self

from actions.arguments import argument_problem

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


class BaseAgentAction(ABC):
    """One step. Subclasses set ``name`` and ``description`` and implement ``run``.

    ``parameters`` (a JSON Schema) is what an AI-driven loop shows the model
    when it offers this action as a tool; the default takes no arguments.
    """

    name: str = ""
    description: str = ""

    @classmethod
    def create(cls, **kwargs: Any) -> Self:
        return cls(**kwargs)

    @property
    def parameters(self) -> dict[str, Any]:
        return copy.deepcopy(EMPTY_PARAMETERS)

    def argument_problem(self, arguments: Any) -> str | None:
        """What is wrong with ``arguments`` a model sent, in one line; ``None`` when they fit.

        By default they are checked against :attr:`parameters` (JSON Schema, see
        :func:`actions.arguments.argument_problem`); a typed action checks them
        against its arguments type.
        """
        return argument_problem(schema=self.parameters, arguments=arguments)

    def as_tool(self) -> dict[str, Any]:
        """The tool payload an AI-driven loop offers the model for this action."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    @abstractmethod
    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        """Do the step; return its value, or ``None`` when there is none."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

"""``BaseAgentAction``: one step of an agent, code or one forced model call."""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from datetime import timedelta
from typing import Any, ClassVar, Self

from agentloop.actions.arguments import argument_problem
from agentloop.actions.caching import caching, step_cache_key

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


class BaseAgentAction(ABC):
    """One step. Subclasses set ``name`` and ``description`` and implement ``run``.

    ``parameters`` (a JSON Schema) is what an AI-driven loop shows the model
    when it offers this action as a tool; the default takes no arguments.

    A step may cache its result (opt-in, :mod:`agentloop.actions.caching`): set ``cache_ttl``.
    """

    name: str = ""
    description: str = ""
    #: How long a result is kept in the run's step cache (seconds or a ``timedelta``);
    #: ``None`` (the default): never cached.
    cache_ttl: ClassVar[timedelta | float | None] = None
    #: Part of the default :meth:`cache_key`: change it when what ``run`` computes changes.
    cache_version: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "run" in cls.__dict__:  # every run goes through the step cache (a no-op unless opted in)
            cls.run = caching(cls.__dict__["run"])  # type: ignore[method-assign,assignment]

    async def cache_key(self, *, arguments: dict[str, Any], context: Any) -> str | None:
        """The key of this call's result in the step cache; ``None``: not cached this time
        (an override may be ``def`` or ``async def``; one that raises is not cached, logged).

        By default a hash of the action's name, ``arguments`` (canonical JSON) and
        :attr:`cache_version`; arguments that are not JSON are not cached.
        """
        return step_cache_key(self.name, arguments, self.cache_version)

    def cache_decode(self, value: Any) -> Any:
        """What a cache hit returns for a result that was a pydantic model or dataclass
        (``value`` is its JSON data): the data itself unless overridden."""
        return value

    @classmethod
    def create(cls, **kwargs: Any) -> Self:
        return cls(**kwargs)

    @property
    def parameters(self) -> dict[str, Any]:
        return copy.deepcopy(EMPTY_PARAMETERS)

    def argument_problem(self, arguments: Any) -> str | None:
        """What is wrong with ``arguments`` a model sent, in one line; ``None`` when they fit.

        By default they are checked against :attr:`parameters` (JSON Schema, see
        :func:`agentloop.actions.arguments.argument_problem`); a typed action checks them
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

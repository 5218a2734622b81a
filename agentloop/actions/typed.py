"""Typed steps: a forced tool call whose output is a pydantic model, and an action whose
arguments are one.

:class:`TypedToolAction` is a :class:`~actions.ForcedToolAction` that declares its
output type (``class PlanTrip(TypedToolAction[TripPlan])``, or ``output_type =
TripPlan``):

- its tool schema is generated from the type (:meth:`TypedToolAction.tool_payload`,
  :func:`agentloop.actions.schema.tool_schema`): it needs no set-up. A row of the tool store
  under its tool id wins (schemas stay data: ``agentloop tools sync`` writes the
  generated ones there, an operator may edit them); a row that differs from the
  generated schema is logged once per process as drift (``agentloop tools sync
  --check`` fails on it);
- the model's arguments come back validated, as an instance of the type
  (validated with the run's ``arguments`` and ``context`` as pydantic's
  validation context, so a validator can read them: ``info.context["context"]``);
- arguments the type refuses are sent back to the model with pydantic's errors
  for :attr:`~actions.ForcedToolAction.output_retries` further tries (default 1)
  before the fallback; ``normalize`` is optional and may add business checks:
  returning ``None`` rejects the answer, raising ``ValueError`` sends the message
  back for another try.

:class:`TypedAction` is an action an AI-driven loop offers as a tool: its
``parameters`` come from ``arguments_type``, and :meth:`TypedAction.perform`
receives the arguments validated, as an instance.
"""

from __future__ import annotations

import json
import logging
import threading
import typing
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import ValidationError

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.base import BaseAgentAction
from agentloop.actions.forced_tool import ForcedToolAction, OutputRejection
from agentloop.actions.schema import schema_description, tool_schema, type_adapter, validation_problems

logger = logging.getLogger(__name__)

OutputT = TypeVar("OutputT")
ArgumentsT = TypeVar("ArgumentsT")

#: The key of the marker ``agentloop tools sync`` adds to a generated row (no model sees it).
SYNC_MARKER = "x-agentloop"
_drift_lock = threading.Lock()
_drift_told: set[tuple[str, str]] = set()


def tool_content(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A tool payload without its sync marker: what two payloads are compared on."""
    return {key: value for key, value in payload.items() if key != SYNC_MARKER}


def canonical_tool_content(payload: Mapping[str, Any]) -> str:
    """:func:`tool_content` as canonical JSON (sorted keys, no spaces): equal for equal payloads."""
    return json.dumps(tool_content(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _type_argument(cls: type, generic: type) -> Any:
    """The type ``cls`` gave ``generic``'s parameter (``class X(generic[T])``), or ``None``."""
    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(base) is generic:
                arguments = typing.get_args(base)
                if arguments and not isinstance(arguments[0], TypeVar):
                    return arguments[0]
    return None


def _snake_case(name: str) -> str:
    out = "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
    return out or "tool"


class TypedToolAction(ForcedToolAction, Generic[OutputT]):
    """A forced tool call whose output is ``output_type`` (see the module doc).

    Set ``name``, ``description`` and the output type, and implement
    :meth:`build_instruction`. ``tool_name`` defaults to the action's ``name``
    (else the type's name in snake case, which then names the action too), and
    the id its schema is stored under (``tool_id``) to ``tool_name``.
    """

    #: The output type: a pydantic model (or a dataclass / ``TypedDict``); taken from
    #: ``TypedToolAction[Model]`` when not set.
    output_type: ClassVar[Any] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("output_type") is None:
            declared = _type_argument(cls, TypedToolAction)
            if declared is not None:
                cls.output_type = declared
        if cls.output_type is None:
            return
        if not cls.__dict__.get("tool_name"):
            own_name = cls.__dict__.get("name")
            cls.tool_name = own_name or cls.tool_name or _snake_case(getattr(cls.output_type, "__name__", ""))
        if not cls.name:
            cls.name = cls.tool_name

    @classmethod
    def default_tool_id(cls) -> str:
        """The id its schema is stored under unless the context names one: ``tool_id``, else ``tool_name``."""
        return cls.tool_id or cls.tool_name

    def stored_tool_id(self, *, context: Any) -> str | None:
        return super().stored_tool_id(context=context) or self.default_tool_id()

    @classmethod
    def tool_payload(cls) -> dict[str, Any]:
        """The tool schema generated from :attr:`output_type`: ``{"name", "description", "parameters"}``."""
        if cls.output_type is None:
            raise TypeError(f"{cls.__qualname__} declares no output_type")
        description = cls.description or schema_description(cls.output_type) or cls.tool_name
        return {"name": cls.tool_name, "description": description, "parameters": tool_schema(cls.output_type)}

    async def load_tool_payload(self, *, context: Any) -> dict[str, Any] | None:
        """The tool store's row under its tool id when there is a usable one (the row wins; a row
        that differs from :meth:`tool_payload` is logged once per process), else the generated
        payload."""
        row = await super().load_tool_payload(context=context)
        generated = self.tool_payload()
        if row is None:
            return generated
        if canonical_tool_content(row) != canonical_tool_content(generated):
            self._tell_drift(row)
        return row

    def _tell_drift(self, row: Mapping[str, Any]) -> None:
        cls = type(self)
        told = (f"{cls.__module__}.{cls.__qualname__}", canonical_tool_content(row))
        with _drift_lock:
            if told in _drift_told:
                return
            _drift_told.add(told)
        logger.warning(
            "tool %r in the tool store differs from the schema %s generates; the row wins "
            "(`agentloop tools sync --check` lists drift, `agentloop tools sync --force` overwrites it)",
            self.default_tool_id(),
            told[0],
        )

    def cache_decode(self, value: Any) -> Any:
        """A cached result back as an :attr:`output_type` instance (the data as it is when it no
        longer fits the type)."""
        try:
            return type_adapter(self.output_type).validate_python(value)
        except Exception:  # a validator that needs the run's context: the data as it is
            return value

    def normalize(self, *, parsed: Any, arguments: dict[str, Any], context: Any) -> Any:
        """Business checks on the validated output (``parsed`` is an ``output_type`` instance).

        Return the step's value (by default the instance itself), ``None`` to reject it, or
        raise ``ValueError`` to send the message back to the model for another try.
        """
        return parsed

    async def check_output(self, *, parsed: dict[str, Any], arguments: dict[str, Any], context: Any) -> Any:
        """The validated instance, checked by :meth:`normalize`; a refused one asks for a retry."""
        if self.output_type is None:
            raise TypeError(f"{type(self).__qualname__} declares no output_type")
        try:
            output = type_adapter(self.output_type).validate_python(
                parsed, context={"arguments": arguments, "context": context}
            )
        except ValidationError as error:
            return OutputRejection(
                reason=f"invalid arguments: {validation_problems(error.errors())}", retry=True
            )
        try:
            value = await maybe_await(self.normalize(parsed=output, arguments=arguments, context=context))
        except ValueError as error:
            return OutputRejection(reason=str(error) or type(error).__name__, retry=True)
        except Exception as error:  # a check that trips on odd output is a rejection
            return OutputRejection(reason=f"normalize raised {type(error).__name__}: {error}")
        return OutputRejection(reason="model output rejected by normalize") if value is None else value


class TypedAction(BaseAgentAction, Generic[ArgumentsT]):
    """An action whose arguments are ``arguments_type`` (``class LookUp(TypedAction[Query])``).

    Its ``parameters`` (what an AI-driven loop offers the model) come from the
    type; arguments the type refuses are a problem the loop sends back to the
    model (:meth:`argument_problem`); :meth:`perform` gets them validated.
    """

    #: The arguments' type; taken from ``TypedAction[Model]`` when not set.
    arguments_type: ClassVar[Any] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("arguments_type") is None:
            declared = _type_argument(cls, TypedAction)
            if declared is not None:
                cls.arguments_type = declared

    @property
    def parameters(self) -> dict[str, Any]:
        return tool_schema(self.arguments_type)

    def validate(self, arguments: Any) -> ArgumentsT:
        """``arguments`` as an ``arguments_type`` instance (``pydantic.ValidationError`` when refused)."""
        value: ArgumentsT = type_adapter(self.arguments_type).validate_python(arguments)
        return value

    def argument_problem(self, arguments: Any) -> str | None:
        try:
            self.validate(arguments)
        except ValidationError as error:
            return f"invalid arguments: {validation_problems(error.errors())}"
        return None

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        return await maybe_await(self.perform(self.validate(arguments), context=context))

    @abstractmethod
    def perform(self, arguments: ArgumentsT, *, context: Any) -> Any:
        """Do the step with validated ``arguments`` (``def`` or ``async def``)."""

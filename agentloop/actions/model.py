"""The model-processor protocol and the values a model turn returns.

A processor is whatever ``context.processor`` holds: the OpenAI processor in
``orchestration``, the offline model, or a scripted test double. The core only
speaks this protocol.

Tools are plain JSON objects ``{"name", "description", "parameters"}`` where
``parameters`` is a JSON Schema; a forced choice is ``[{"name": tool_name}]``.
History messages are JSON objects in a provider-neutral shape::

    {"role": "user" | "assistant" | "tool" | "system", "content": str,
     "tool_calls": [{"id", "name", "arguments"}],   # assistant turns only
     "tool_call_id": str}                           # tool results only
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentloop.actions.degradation import report_model_failure
from agentloop.actions.usage import Usage, metered_turn

JsonObject = dict[str, Any]
#: The step a raw :meth:`ModelRequest.send` reports its failed reply as, unless told another.
RAW_REQUEST = "model_request"


@dataclass(frozen=True, kw_only=True, slots=True)
class FunctionCall:
    """One tool call the model made. ``arguments`` is the raw string it sent."""

    name: str
    arguments: str
    id: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FunctionCall:
        return cls(
            name=str(data["name"]), arguments=str(data.get("arguments", "")), id=str(data.get("id", ""))
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class AiResponse:
    """What one model turn returned. A fault is a value: ``error`` is set."""

    text: str = ""
    function_calls: tuple[FunctionCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    model: str = ""

    @property
    def has_error(self) -> bool:
        return self.error is not None

    @classmethod
    def failure(cls, error: str, *, usage: Usage | None = None, model: str = "") -> AiResponse:
        return cls(error=error, usage=usage or Usage(), model=model)

    def to_dict(self) -> JsonObject:
        return {
            "text": self.text,
            "function_calls": [call.to_dict() for call in self.function_calls],
            "usage": self.usage.to_dict(),
            "error": self.error,
            "model": self.model,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AiResponse:
        return cls(
            text=str(data.get("text", "")),
            function_calls=tuple(FunctionCall.from_dict(c) for c in data.get("function_calls", ())),
            usage=Usage.from_dict(data.get("usage", {})),
            error=data.get("error"),
            model=str(data.get("model", "")),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRequest:
    """One model turn asked of a processor: the keywords of :meth:`ModelProcessor.send_request`
    as one value, for code that handles or passes on requests (wrappers, test doubles).

    :meth:`send` asks a processor for this turn.
    """

    instruction: str
    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choices: tuple[Mapping[str, Any], ...] | None = None
    history_messages: tuple[Mapping[str, Any], ...] = ()
    documents: tuple[Any, ...] = ()
    files: tuple[Any, ...] = ()
    is_auto_handle_function_call: bool = False

    def to_dict(self) -> JsonObject:
        """The request as JSON (what a recording keeps of it); values that are not JSON as text."""
        return {
            "instruction": self.instruction,
            "tools": [_json(tool) for tool in self.tools],
            "tool_choices": None if self.tool_choices is None else [_json(c) for c in self.tool_choices],
            "history_messages": [_json(message) for message in self.history_messages],
            "documents": [_json(document) for document in self.documents],
            "files": [_json(file) for file in self.files],
            "is_auto_handle_function_call": self.is_auto_handle_function_call,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelRequest:
        choices = data.get("tool_choices")
        return cls(
            instruction=str(data.get("instruction", "")),
            tools=tuple(data.get("tools") or ()),
            tool_choices=None if choices is None else tuple(choices),
            history_messages=tuple(data.get("history_messages") or ()),
            documents=tuple(data.get("documents") or ()),
            files=tuple(data.get("files") or ()),
            is_auto_handle_function_call=bool(data.get("is_auto_handle_function_call", False)),
        )

    @property
    def tool_names(self) -> list[str]:
        """The names of the offered tools, in order."""
        return [str(tool["name"]) for tool in self.tools]

    @property
    def forced_tool(self) -> str | None:
        """The name of the tool the request forces, if it forces one."""
        return str(self.tool_choices[0]["name"]) if self.tool_choices else None

    async def send(self, processor: ModelProcessor, *, step: str = RAW_REQUEST) -> AiResponse:
        """Ask ``processor`` for this turn, as a step of the run.

        A reply that is a failure (``reply.has_error``: the model could not be reached, or
        answered with an error, after the processor's retries) is reported to the run as a
        model failure of ``step`` (:func:`~agentloop.actions.report_model_failure`): the run ends
        ``degraded`` with an event naming the step and the reason. The reply is returned
        either way; check ``reply.has_error`` before using ``reply.text``. Like every model
        call, it counts against the run's usage and token budget (:meth:`forward`).
        """
        response = await self.forward(processor)
        if response.has_error:
            await report_model_failure(action=step, reason=f"model error: {response.error}")
        return response

    async def forward(self, processor: ModelProcessor) -> AiResponse:
        """Pass this turn on to ``processor`` and return its reply as it is, reporting no failure:
        for a processor that wraps another (its own caller reports what a failure means).

        The call counts against the run's token budget like every model call
        (:func:`~agentloop.actions.usage.metered_turn`): a spent budget raises
        :class:`~agentloop.actions.errors.TokenBudgetExceededError` before the call, and the
        reply's usage is added to the run's (once, however many processors it went through).
        """
        return await metered_turn(
            lambda: processor.send_request(
                instruction=self.instruction,
                tools=self.tools,
                tool_choices=self.tool_choices,
                history_messages=self.history_messages,
                documents=self.documents,
                files=self.files,
                is_auto_handle_function_call=self.is_auto_handle_function_call,
            )
        )


def _json(value: Any) -> Any:
    """``value`` as JSON data (mappings and sequences copied, anything else that is not JSON as text)."""
    if isinstance(value, Mapping):
        return {str(key): _json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json(item) for item in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


@runtime_checkable
class ModelProcessor(Protocol):
    """What ``context.processor`` must provide.

    ``tool_choices`` of ``None`` lets the model choose freely among ``tools``;
    ``[{"name": n}]`` forces the tool ``n``. Implementations never raise for a
    model fault: they return :meth:`AiResponse.failure`.
    """

    async def send_request(
        self,
        *,
        instruction: str,
        tools: Sequence[Mapping[str, Any]],
        tool_choices: Sequence[Mapping[str, Any]] | None,
        history_messages: Sequence[Mapping[str, Any]],
        documents: Sequence[Any],
        files: Sequence[Any],
        is_auto_handle_function_call: bool,
    ) -> AiResponse: ...

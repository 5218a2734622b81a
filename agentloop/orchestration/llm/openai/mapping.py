"""Pure mapping between the provider-neutral shapes of ``agentloop.actions.model`` and OpenAI's
Chat Completions shapes (messages, tools, tool choice, completions). No I/O."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from openai.types.chat import (
    ChatCompletion,
    ChatCompletionAssistantMessageParam,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
    ChatCompletionToolChoiceOptionParam,
)
from openai.types.shared_params import FunctionDefinition

from agentloop.actions.model import AiResponse, FunctionCall
from agentloop.actions.usage import Usage
from agentloop.orchestration.llm.documents import as_text, system_prompt
from agentloop.orchestration.llm.tool_shapes import (
    chosen_tool_names,
    history_tool_call,
    raw_arguments,
    tool_call_id,
    tool_name,
)

logger = logging.getLogger(__name__)

__all__ = [
    "from_chat_completion",
    "to_openai_messages",
    "to_openai_tool_choice",
    "to_openai_tools",
]


def to_openai_messages(
    *, instruction: str, history_messages: Sequence[Mapping[str, Any]], documents: Sequence[Any] = ()
) -> list[ChatCompletionMessageParam]:
    """The system message (instruction + documents) followed by the mapped history.

    Raises ``ValueError`` for a history message it cannot map.
    """
    messages: list[ChatCompletionMessageParam] = []
    system = system_prompt(instruction, documents)
    if system:
        messages.append({"role": "system", "content": system})
    for index, message in enumerate(history_messages):
        messages.append(_history_message(index, message))
    return messages


def _history_message(index: int, message: Mapping[str, Any]) -> ChatCompletionMessageParam:
    if not isinstance(message, Mapping):
        raise ValueError(f"history message #{index} is not an object")
    role = message.get("role")
    content = as_text(message.get("content"))
    if role == "user":
        return {"role": "user", "content": content}
    if role == "system":
        return {"role": "system", "content": content}
    if role == "tool":
        return {"role": "tool", "tool_call_id": tool_call_id(index, message), "content": content}
    if role == "assistant":
        calls = [_tool_call_param(index, call) for call in message.get("tool_calls") or ()]
        assistant: ChatCompletionAssistantMessageParam = {"role": "assistant"}
        if calls:
            assistant["content"] = content or None
            assistant["tool_calls"] = calls
        else:
            assistant["content"] = content
        return assistant
    raise ValueError(f"history message #{index}: unknown role {role!r}")


def _tool_call_param(index: int, call: Any) -> ChatCompletionMessageFunctionToolCallParam:
    name, call_id, arguments = history_tool_call(index, call)
    return {
        "id": call_id,
        "type": "function",
        "function": {
            "name": name,
            "arguments": arguments if isinstance(arguments, str) else as_text(arguments),
        },
    }


def to_openai_tools(tools: Sequence[Mapping[str, Any]]) -> list[ChatCompletionFunctionToolParam]:
    """``{"name", "description", "parameters"}`` -> ``{"type": "function", "function": {...}}``.

    ``description``, ``parameters`` and ``strict`` are passed on when present.
    Raises ``ValueError`` for a tool without a name.
    """
    mapped: list[ChatCompletionFunctionToolParam] = []
    for tool in tools:
        function: FunctionDefinition = {"name": tool_name(tool)}
        if tool.get("description"):
            function["description"] = str(tool["description"])
        parameters = tool.get("parameters")
        if isinstance(parameters, Mapping):
            function["parameters"] = dict(parameters)
        if isinstance(tool.get("strict"), bool):
            function["strict"] = tool["strict"]
        mapped.append({"type": "function", "function": function})
    return mapped


def to_openai_tool_choice(
    tool_choices: Sequence[Mapping[str, Any]] | None, tools: Sequence[ChatCompletionFunctionToolParam]
) -> ChatCompletionToolChoiceOptionParam | None:
    """``None`` without tools; ``"auto"`` without choices; one choice forces that function;
    several require a call (the caller offers only the chosen tools).

    Raises ``ValueError`` when a choice names no tool or a tool that is not offered.
    """
    names = chosen_tool_names(tool_choices, {tool["function"]["name"] for tool in tools})
    if not tools:
        return None
    if not names:
        return "auto"
    if len(names) == 1:
        return {"type": "function", "function": {"name": names[0]}}
    return "required"


# response mapping


def from_chat_completion(completion: ChatCompletion, *, default_model: str = "") -> AiResponse:
    """The first choice as an :class:`AiResponse`; a failure (with usage) when there is none.

    Function-call arguments are kept exactly as sent (a non-string value, which
    only a non-conforming server sends, is JSON-encoded).
    """
    usage = _usage(completion)
    model = str(getattr(completion, "model", "") or default_model)
    choices = getattr(completion, "choices", None) or []
    if not choices:
        return AiResponse.failure("openai: response has no choices", usage=usage, model=model)
    message = choices[0].message
    calls: list[FunctionCall] = []
    for call in getattr(message, "tool_calls", None) or ():
        function = getattr(call, "function", None)
        if function is None:
            logger.debug(
                "openai processor: skipped a non-function tool call of type %r", getattr(call, "type", None)
            )
            continue
        calls.append(
            FunctionCall(
                name=str(getattr(function, "name", "")),
                arguments=raw_arguments(getattr(function, "arguments", "")),
                id=str(getattr(call, "id", "") or ""),
            )
        )
    legacy = getattr(message, "function_call", None)
    if legacy is not None and not calls:
        calls.append(FunctionCall(name=str(legacy.name), arguments=raw_arguments(legacy.arguments)))
    content = getattr(message, "content", None)
    return AiResponse(
        text=content if isinstance(content, str) else "",
        function_calls=tuple(calls),
        usage=usage,
        model=model,
    )


def _usage(completion: ChatCompletion) -> Usage:
    usage = getattr(completion, "usage", None)
    if usage is None:
        return Usage()
    return Usage(
        input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
    )

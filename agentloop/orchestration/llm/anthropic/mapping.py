"""Pure mapping between the provider-neutral shapes of ``agentloop.actions.model`` and Anthropic's Messages
API
(system prompt, messages, tools, tool choice, the reply). No I/O.

- The instruction and the reference documents are the ``system`` prompt
  (:func:`~agentloop.orchestration.llm.documents.system_prompt`), and so is every history
  message of role ``system``, in order: the Messages API has no system turns.
- user and assistant messages become turns of content blocks; an assistant's
  ``tool_calls`` become ``tool_use`` blocks (arguments that are not a JSON
  object are sent as ``{}``: the tool result that follows says what was wrong
  with them); a ``tool`` message becomes a ``tool_result`` block of a user turn.
  Adjacent turns of one role are merged, as the API requires.
- The API needs a first user turn: without one, the instruction is that turn
  (and the system prompt keeps the documents).
- Tools ``{"name", "description", "parameters"}`` become ``{"name",
  "description", "input_schema"}``; one tool choice forces that tool
  (``{"type": "tool", "name": ...}``), several require one of them
  (``{"type": "any"}``, the caller offers only those), none lets the model choose.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from anthropic.types import Message, MessageParam, ToolChoiceParam, ToolParam

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

__all__ = ["from_message", "to_anthropic_request", "to_anthropic_tool_choice", "to_anthropic_tools"]

Block = dict[str, Any]


def to_anthropic_request(
    *, instruction: str, history_messages: Sequence[Mapping[str, Any]], documents: Sequence[Any] = ()
) -> tuple[str, list[MessageParam]]:
    """The system prompt and the turns for one request (see the module doc).

    Raises ``ValueError`` for a history message it cannot map.
    """
    system_notes: list[str] = []
    turns: list[tuple[str, list[Block]]] = []
    for index, message in enumerate(history_messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"history message #{index} is not an object")
        if message.get("role") == "system":
            system_notes.append(as_text(message.get("content")))
            continue
        role, blocks = _turn(index, message)
        if not blocks:
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    if not turns or turns[0][0] != "user":
        turns.insert(0, ("user", [_text_block(instruction or "Go ahead.")]))
        instruction = ""
    system = "\n\n".join(part for part in (system_prompt(instruction, documents), *system_notes) if part)
    messages: list[MessageParam] = [{"role": role, "content": blocks} for role, blocks in turns]  # type: ignore[misc]
    return system, messages


def _turn(index: int, message: Mapping[str, Any]) -> tuple[str, list[Block]]:
    role = message.get("role")
    text = as_text(message.get("content"))
    if role == "user":
        return "user", [_text_block(text)] if text else []
    if role == "tool":
        return "user", [{"type": "tool_result", "tool_use_id": tool_call_id(index, message), "content": text}]
    if role == "assistant":
        blocks = [_text_block(text)] if text else []
        blocks += [_tool_use_block(index, call) for call in message.get("tool_calls") or ()]
        return "assistant", blocks
    raise ValueError(f"history message #{index}: unknown role {role!r}")


def _text_block(text: str) -> Block:
    return {"type": "text", "text": text}


def _tool_use_block(index: int, call: Any) -> Block:
    name, call_id, arguments = history_tool_call(index, call)
    return {"type": "tool_use", "id": call_id, "name": name, "input": _input_object(arguments)}


def _input_object(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return {}
    return dict(arguments) if isinstance(arguments, Mapping) else {}


def to_anthropic_tools(tools: Sequence[Mapping[str, Any]]) -> list[ToolParam]:
    """``{"name", "description", "parameters"}`` -> ``{"name", "description", "input_schema"}``.

    A tool without ``parameters`` takes an empty object. Raises ``ValueError`` for a tool without a name.
    """
    mapped: list[ToolParam] = []
    for tool in tools:
        name = tool_name(tool)
        parameters = tool.get("parameters")
        schema = dict(parameters) if isinstance(parameters, Mapping) else {"type": "object", "properties": {}}
        param: ToolParam = {"name": name, "input_schema": schema}
        if tool.get("description"):
            param["description"] = str(tool["description"])
        if isinstance(tool.get("strict"), bool):
            param["strict"] = tool["strict"]
        mapped.append(param)
    return mapped


def to_anthropic_tool_choice(
    tool_choices: Sequence[Mapping[str, Any]] | None, tools: Sequence[ToolParam]
) -> ToolChoiceParam | None:
    """``None`` without tools; ``auto`` without choices; one choice forces that tool; several
    require a call (the caller offers only the chosen tools).

    Raises ``ValueError`` when a choice names no tool or a tool that is not offered.
    """
    names = chosen_tool_names(tool_choices, {tool["name"] for tool in tools})
    if not tools:
        return None
    if not names:
        return {"type": "auto"}
    if len(names) == 1:
        return {"type": "tool", "name": names[0]}
    return {"type": "any"}


def from_message(message: Message, *, default_model: str = "") -> AiResponse:
    """The reply as an :class:`AiResponse`: text blocks joined, ``tool_use`` blocks as calls; a
    failure when the body is not a message with a list of content blocks.

    A call's ``input`` is JSON-encoded; one that is a string (which only a
    non-conforming server sends) is kept exactly as sent.
    """
    usage = getattr(message, "usage", None)
    content = getattr(message, "content", None)
    if not isinstance(content, list):  # only a non-conforming server sends this
        return AiResponse.failure(
            "anthropic: response is not a message with content blocks", model=default_model
        )
    texts: list[str] = []
    calls: list[FunctionCall] = []
    for block in content:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(str(getattr(block, "text", "") or ""))
        elif kind == "tool_use":
            arguments = raw_arguments(getattr(block, "input", None))
            name, call_id = getattr(block, "name", ""), getattr(block, "id", "")
            calls.append(FunctionCall(name=str(name or ""), arguments=arguments, id=str(call_id or "")))
    return AiResponse(
        text="".join(texts),
        function_calls=tuple(calls),
        usage=Usage(
            input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
            output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
        ),
        model=str(getattr(message, "model", "") or default_model),
    )

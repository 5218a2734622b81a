"""The provider-neutral tool shapes, read alike by both providers' mappings (no SDK, no I/O).

:mod:`agentloop.actions.model` describes tools, tool choices and tool calls once for every
provider; the OpenAI and Anthropic mappings write them in their own wire shapes. What comes before
that is the same for both and lives here, with the same error for the same fault:

- a tool needs a ``name`` (:func:`tool_name`);
- tool choices name offered tools (:func:`chosen_tool_names`), and several choices offer only the
  chosen tools (:func:`offered_tools`: the model must call one of them);
- a history message's tool call needs a ``name`` and an ``id`` (:func:`history_tool_call`), a
  ``tool`` message a ``tool_call_id`` (:func:`tool_call_id`);
- a reply's call arguments are kept exactly as the server sent them (:func:`raw_arguments`).

Every check raises ``ValueError``; the processor turns it into the failure ``invalid request: ...``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from agentloop.actions.model import FunctionCall

__all__ = [
    "chosen_tool_names",
    "history_tool_call",
    "offered_tools",
    "raw_arguments",
    "tool_call_id",
    "tool_name",
]

_MAX_DETAIL = 200  # characters of an offending value kept in an error message

ToolT = TypeVar("ToolT")


def tool_name(tool: Any) -> str:
    """The name of a tool ``{"name", "description", "parameters"}``; ``ValueError`` without one."""
    name = tool.get("name") if isinstance(tool, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ValueError(f"tool without a name: {tool!r}"[:_MAX_DETAIL])
    return name


def chosen_tool_names(
    tool_choices: Sequence[Mapping[str, Any]] | None, offered: Collection[str]
) -> list[str]:
    """The names ``tool_choices`` (``[{"name": n}, ...]``) choose among the ``offered`` tools' names;
    empty when there is no choice (the model chooses).

    Raises ``ValueError`` for choices without tools, a choice without a name, or one naming a tool
    that is not offered.
    """
    if not tool_choices:
        return []
    if not offered:
        raise ValueError("tool_choices given without tools")
    names = []
    for choice in tool_choices:
        name = choice.get("name") if isinstance(choice, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"a tool choice needs a 'name': {choice!r}"[:_MAX_DETAIL])
        if name not in offered:
            raise ValueError(f"tool choice {name!r} is not among the tools")
        names.append(name)
    return names


def offered_tools(
    tools: list[ToolT], tool_choices: Sequence[Mapping[str, Any]] | None, name: Callable[[ToolT], str]
) -> list[ToolT]:
    """The mapped ``tools`` a request offers: all of them, or, when several tools are chosen (the
    model must call one of them), only those (``name`` reads a mapped tool's name)."""
    if not tool_choices or len(tool_choices) < 2:
        return tools
    chosen = {str(choice.get("name")) for choice in tool_choices}
    return [tool for tool in tools if name(tool) in chosen]


def history_tool_call(index: int, call: Any) -> tuple[str, str, Any]:
    """``(name, id, arguments)`` of a tool call of history message ``index`` (a ``{name, id,
    arguments}`` mapping or a :class:`FunctionCall`); ``ValueError`` when it is not one."""
    if isinstance(call, FunctionCall):
        call = call.to_dict()
    if not isinstance(call, Mapping):
        raise ValueError(f"history message #{index}: a tool call is not an object")
    name, call_id = call.get("name"), call.get("id")
    if not isinstance(name, str) or not name:
        raise ValueError(f"history message #{index}: a tool call needs a 'name'")
    if not isinstance(call_id, str) or not call_id:
        raise ValueError(f"history message #{index}: tool call {name!r} needs an 'id'")
    return name, call_id, call.get("arguments")


def tool_call_id(index: int, message: Mapping[str, Any]) -> str:
    """The ``tool_call_id`` of ``tool`` history message ``index``; ``ValueError`` without one."""
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise ValueError(f"history message #{index}: a tool message needs a 'tool_call_id'")
    return call_id


def raw_arguments(arguments: Any) -> str:
    """A reply's call arguments as sent: a string as it is, nothing as ``""``, anything else (which
    only a non-conforming server sends) JSON-encoded."""
    if arguments is None:
        return ""
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)

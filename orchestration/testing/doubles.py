"""Model test doubles users can use too.

- :class:`ScriptedModel` answers from a queue of responses, in order.
- :class:`FunctionModel` calls a function per turn, which sees the request.
- :class:`~orchestration.llm.offline.OfflineModel` derives answers from
  tool schemas (re-exported by ``orchestration.testing``).

Every double records each :class:`ModelRequest` it received, so a test can
assert the whole conversation at once.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from actions.context import maybe_await
from actions.model import AiResponse, FunctionCall, Usage


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRequest:
    """One request a double received (copied, so later changes cannot alter it)."""

    instruction: str
    tools: tuple[dict[str, Any], ...]
    tool_choices: tuple[dict[str, Any], ...] | None
    history_messages: tuple[dict[str, Any], ...]
    documents: tuple[Any, ...]
    files: tuple[Any, ...]
    is_auto_handle_function_call: bool

    @property
    def tool_names(self) -> list[str]:
        return [str(tool["name"]) for tool in self.tools]

    @property
    def forced_tool(self) -> str | None:
        return str(self.tool_choices[0]["name"]) if self.tool_choices else None


def tool_call(
    name: str, arguments: Mapping[str, Any] | str, *, id: str = "", usage: Usage | None = None
) -> AiResponse:
    """A response that calls ``name``; a ``str`` is sent raw (to script malformed arguments)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return AiResponse(function_calls=(FunctionCall(name=name, arguments=raw, id=id),), usage=usage or Usage())


def text_reply(text: str, *, usage: Usage | None = None) -> AiResponse:
    """A plain-text response."""
    return AiResponse(text=text, usage=usage or Usage())


def error_reply(message: str) -> AiResponse:
    """A failed model turn."""
    return AiResponse.failure(message)


class _RecordingModel:
    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    def _record(self, **kwargs: Any) -> ModelRequest:
        request = ModelRequest(
            instruction=kwargs["instruction"],
            tools=tuple(json.loads(json.dumps(list(kwargs["tools"])))),
            tool_choices=None
            if kwargs["tool_choices"] is None
            else tuple(dict(c) for c in kwargs["tool_choices"]),
            history_messages=tuple(json.loads(json.dumps(list(kwargs["history_messages"]), default=str))),
            documents=tuple(kwargs["documents"]),
            files=tuple(kwargs["files"]),
            is_auto_handle_function_call=bool(kwargs["is_auto_handle_function_call"]),
        )
        self.requests.append(request)
        return request


class ScriptedModel(_RecordingModel):
    """Answers with ``responses`` in order; an empty queue answers with an error response."""

    def __init__(self, responses: Iterable[AiResponse] = ()) -> None:
        super().__init__()
        self.queue: deque[AiResponse] = deque(responses)

    def push(self, *responses: AiResponse) -> None:
        self.queue.extend(responses)

    def assert_consumed(self) -> None:
        assert not self.queue, f"{len(self.queue)} scripted response(s) were never requested"

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
    ) -> AiResponse:
        self._record(
            instruction=instruction,
            tools=tools,
            tool_choices=tool_choices,
            history_messages=history_messages,
            documents=documents,
            files=files,
            is_auto_handle_function_call=is_auto_handle_function_call,
        )
        if not self.queue:
            return AiResponse.failure("scripted model: no response left in the script")
        return self.queue.popleft()


TurnFunction = Callable[[ModelRequest], Any]


class FunctionModel(_RecordingModel):
    """Calls ``function(request)`` each turn; it returns (or awaits to) an :class:`AiResponse`."""

    def __init__(self, function: TurnFunction) -> None:
        super().__init__()
        self.function = function

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
    ) -> AiResponse:
        request = self._record(
            instruction=instruction,
            tools=tools,
            tool_choices=tool_choices,
            history_messages=history_messages,
            documents=documents,
            files=files,
            is_auto_handle_function_call=is_auto_handle_function_call,
        )
        response = await maybe_await(self.function(request))
        if not isinstance(response, AiResponse):
            raise TypeError(f"FunctionModel's function must return an AiResponse, got {response!r}")
        return response

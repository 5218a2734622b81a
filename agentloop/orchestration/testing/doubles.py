"""Model test doubles users can use too.

- :class:`ScriptedModel` answers from a queue of responses, in order.
- :class:`FunctionModel` calls a function per turn, which sees the request.
- :class:`~agentloop.orchestration.llm.offline.OfflineModel` derives answers from
  tool schemas (re-exported by ``agentloop.orchestration.testing``).

Every double records each :class:`~agentloop.actions.model.ModelRequest` it received
(the processor protocol's one request value), so a test can assert the whole
conversation at once.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.model import AiResponse, FunctionCall, ModelRequest
from agentloop.actions.usage import Usage
from agentloop.orchestration.llm.base import BaseProcessor


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


class _RecordingModel(BaseProcessor):
    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    def _record(self, request: ModelRequest) -> ModelRequest:
        """Keep a copy of ``request`` (JSON values copied, so later changes cannot alter it)."""
        copied = replace(
            request,
            tools=tuple(json.loads(json.dumps(list(request.tools)))),
            tool_choices=None
            if request.tool_choices is None
            else tuple(dict(choice) for choice in request.tool_choices),
            history_messages=tuple(json.loads(json.dumps(list(request.history_messages), default=str))),
        )
        self.requests.append(copied)
        return copied


class ScriptedModel(_RecordingModel):
    """Answers with ``responses`` in order; an empty queue answers with an error response."""

    def __init__(self, responses: Iterable[AiResponse] = ()) -> None:
        super().__init__()
        self.queue: deque[AiResponse] = deque(responses)

    def push(self, *responses: AiResponse) -> None:
        self.queue.extend(responses)

    def assert_consumed(self) -> None:
        assert not self.queue, f"{len(self.queue)} scripted response(s) were never requested"

    async def process(self, request: ModelRequest) -> AiResponse:
        self._record(request)
        if not self.queue:
            return AiResponse.failure("scripted model: no response left in the script")
        return self.queue.popleft()


TurnFunction = Callable[[ModelRequest], Any]


class FunctionModel(_RecordingModel):
    """Calls ``function(request)`` each turn; it returns (or awaits to) an :class:`AiResponse`."""

    def __init__(self, function: TurnFunction) -> None:
        super().__init__()
        self.function = function

    async def process(self, request: ModelRequest) -> AiResponse:
        request = self._record(request)
        response = await maybe_await(self.function(request))
        if not isinstance(response, AiResponse):
            raise TypeError(f"FunctionModel's function must return an AiResponse, got {response!r}")
        return response

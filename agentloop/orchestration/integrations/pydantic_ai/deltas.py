"""A streaming pydantic-ai agent's text and tool arguments as the run's ``delta`` events.

pydantic-ai streams a model request when ``agent.run`` is given an ``event_stream_handler``;
:func:`stream_deltas` is that handler: each streamed piece of text (``TextPartDelta``) and of tool
arguments (``ToolCallPartDelta``) goes to a :class:`~agentloop.orchestration.llm.stream_deltas.DeltaReporter`,
which throttles them into ``progress`` events of phase ``delta`` like the processors' own streams
(``{"seq": n, "text": ...}``, ``{"seq": n, "tool": ..., "call_id": ..., "arguments": ...}``). A
request answered from the journal streams nothing new: pydantic-ai replays its parts, and no delta
is reported for them.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable
from datetime import timedelta
from typing import Any

from pydantic_ai.messages import (
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
)

from agentloop.orchestration.llm.stream_deltas import DEFAULT_STREAM_INTERVAL, DeltaReporter, delta_reporter

__all__ = ["delta_handler"]


def delta_handler(
    *, action: str, replaying: Callable[[], bool], interval: timedelta = DEFAULT_STREAM_INTERVAL
) -> Callable[[Any, AsyncIterable[Any]], Any]:
    """The ``event_stream_handler`` that reports ``action``'s streamed pieces (module doc);
    ``replaying()`` tells whether the request being streamed was answered from the journal."""

    async def stream_deltas(ctx: Any, events: AsyncIterable[Any]) -> None:
        reporter: DeltaReporter | None = None
        async for event in events:
            if replaying():
                continue
            if reporter is None:
                reporter = delta_reporter(action, interval)
                if reporter is None:  # no run listens to step events here
                    return
            await _report(reporter, event)
        if reporter is not None:
            await reporter.flush()

    return stream_deltas


async def _report(reporter: DeltaReporter, event: Any) -> None:
    if isinstance(event, PartStartEvent):
        part = event.part
        if isinstance(part, TextPart):
            await reporter.text(part.content)
        elif isinstance(part, ToolCallPart):
            await reporter.arguments(
                event.index, name=part.tool_name, call_id=part.tool_call_id, piece=part.args_as_json_str()
            )
    elif isinstance(event, PartDeltaEvent):
        delta = event.delta
        if isinstance(delta, TextPartDelta):
            await reporter.text(delta.content_delta)
        elif isinstance(delta, ToolCallPartDelta) and isinstance(delta.args_delta, str):
            name, call_id = delta.tool_name_delta or "", delta.tool_call_id or ""
            await reporter.arguments(event.index, name=name, call_id=call_id, piece=delta.args_delta)

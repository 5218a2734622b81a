"""``DeltaReporter``: a streamed reply's partial output, reported to the run as throttled ``delta`` events.

A processor that streams (``OpenAIProcessor(stream=True)``, ``AnthropicProcessor(stream=True)``)
hands every piece of text and of tool-call arguments it receives to a reporter. The reporter
joins the pieces and reports them with :func:`agentloop.actions.step_events.report_step_event`, phase
``delta``, at most once per ``interval`` (the first piece at once), and once more with whatever is
left when the reply ends (:meth:`DeltaReporter.flush`), so the deltas of a reply always
concatenate to its text and its arguments. Each event carries one stream:

- text: ``{"seq": 3, "text": "<text since the last event>"}``
- a tool call: ``{"seq": 4, "tool": "plan_search", "call_id": "call_1", "arguments": "<more>"}``

``seq`` counts the reply's events from 1. A reply that is abandoned after some of its deltas went
out (its stream broke, or could not be read) gets one more event, ``{"seq": 5, "discard": true}``:
a client drops what that reply's deltas showed, since it did not become a result. A stream that
breaks part-way (cut short without a finish reason, disconnected, stalled past the read timeout)
is read again from the start, as the SDK retries a failed request (:func:`stream_reply`: up to the
processor's ``max_retries`` times, with backoff); each new try is a new reply, its ``seq`` from 1.
The event's ``action`` is the model's name: a processor
is shared by every step of a run and is not told which one calls it; the event's ``path`` says
where in the workflow the step runs. When nobody listens
(:func:`agentloop.actions.step_events.step_events_wanted`
is false, e.g. outside a run), the reporter is :data:`None` and nothing is built.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from agentloop.actions.model import AiResponse
from agentloop.actions.step_events import report_step_event, step_events_wanted
from agentloop.actions.usage import Usage

__all__ = [
    "DEFAULT_STREAM_INTERVAL",
    "DELTA_PHASE",
    "DeltaReporter",
    "StreamReader",
    "StreamTally",
    "StreamedReplies",
    "as_stream_interval",
    "delta_reporter",
    "read_stream",
    "stream_reply",
]

logger = logging.getLogger(__name__)

Piece = TypeVar("Piece", contravariant=True)

#: The least time between two ``delta`` events of one reply, unless a processor is told otherwise.
DEFAULT_STREAM_INTERVAL = timedelta(milliseconds=100)
#: The phase of a streamed-output progress event.
DELTA_PHASE = "delta"


def as_stream_interval(interval: float | timedelta | None) -> timedelta:
    """``interval`` (seconds or a ``timedelta``; ``None``: the default) checked to be >= 0."""
    if interval is None:
        return DEFAULT_STREAM_INTERVAL
    value = interval if isinstance(interval, timedelta) else timedelta(seconds=float(interval))
    if value < timedelta(0):
        raise ValueError(f"stream_interval must not be negative, not {interval!r}")
    return value


@dataclass
class _ToolPiece:
    """The arguments of one tool call received since the last event."""

    name: str
    call_id: str
    arguments: str = ""


@dataclass
class DeltaReporter:
    """Joins a reply's pieces and reports them at most once per ``interval`` (module doc)."""

    action: str
    interval: timedelta = DEFAULT_STREAM_INTERVAL
    clock: Callable[[], float] = time.monotonic
    _text: str = ""
    _tools: dict[int, _ToolPiece] = field(default_factory=dict)
    _seq: int = 0
    _last: float | None = None

    @property
    def sent(self) -> int:
        """How many events were reported so far."""
        return self._seq

    async def text(self, piece: str) -> None:
        """More text of the reply."""
        if piece:
            self._text += piece
            await self._maybe_flush()

    async def arguments(self, index: int, *, name: str, call_id: str, piece: str) -> None:
        """More arguments of the tool call at ``index`` (its name and id as known so far)."""
        if not piece:
            return
        pending = self._tools.get(index)
        if pending is None:
            pending = self._tools[index] = _ToolPiece(name=name, call_id=call_id)
        pending.arguments += piece
        await self._maybe_flush()

    async def flush(self) -> None:
        """Report everything not reported yet (call it once the reply has ended)."""
        text, tools = self._text, sorted(self._tools.items())
        self._text, self._tools = "", {}
        if text:
            await self._report({"text": text})
        for _, tool in tools:
            await self._report({"tool": tool.name, "call_id": tool.call_id, "arguments": tool.arguments})

    async def discard(self) -> None:
        """The reply is abandoned: what was not reported is dropped, and when deltas went out, one
        more event says to drop them (``{"seq": n, "discard": true}``)."""
        self._text, self._tools = "", {}
        if self._seq:
            await self._report({"discard": True})

    async def _maybe_flush(self) -> None:
        now = self.clock()
        if self._last is None or now - self._last >= self.interval.total_seconds():
            self._last = now
            await self.flush()

    async def _report(self, data: dict[str, Any]) -> None:
        self._seq += 1
        await report_step_event(action=self.action, phase=DELTA_PHASE, data={"seq": self._seq, **data})


def delta_reporter(action: str, interval: timedelta) -> DeltaReporter | None:
    """A reporter for one streamed reply, or ``None`` when no run listens to step events here."""
    return DeltaReporter(action=action, interval=interval) if step_events_wanted() else None


class StreamReader(Protocol[Piece]):
    """What reads one provider's stream back into a reply: each piece in order, then the reply."""

    async def add(self, piece: Piece) -> None: ...

    def response(self) -> AiResponse: ...


async def read_stream(
    stream: AsyncIterable[Any], reader: StreamReader[Any], reporter: DeltaReporter | None
) -> AiResponse:
    """Every piece of ``stream`` read by ``reader`` into one :class:`AiResponse`; the reporter
    flushed at the end. Raises whatever iterating ``stream`` raises (after flushing what was received)."""
    try:
        async for piece in stream:
            await reader.add(piece)
    finally:
        if reporter is not None:
            await reporter.flush()
    return reader.response()


#: The first wait before a broken stream is read again, doubled each time up to the last.
_FIRST_BACKOFF, _LAST_BACKOFF = 0.5, 8.0


@dataclass
class StreamTally:
    """The usage every try of one streamed reply reported (a try cut short or broken included):
    what the call cost, whatever became of it."""

    usage: Usage = field(default_factory=Usage)
    #: Whether the error the call ends with broke a stream that had opened (read part-way), not
    #: its opening: the SDK wraps the same dropped connection either way, depending on timing.
    broke: bool = False


async def stream_reply(
    open_stream: Callable[[], Awaitable[Any]],
    reader_for: Callable[[DeltaReporter | None], StreamReader[Any]],
    *,
    action: str,
    interval: timedelta,
    retries: int,
    broken: Callable[[BaseException], bool],
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    tally: StreamTally | None = None,
) -> AiResponse:
    """One streamed reply: ``open_stream()`` (the SDK's request, which it retries itself) read by
    ``reader_for(reporter)``, read again from the start up to ``retries`` times when it breaks
    part-way: cut short (a reply without its end) or by an error ``broken`` says broke it (a
    dropped connection, a read timeout). An abandoned reply's deltas are followed by a discard
    event. Returns the reply, or the last cut-short one, with the usage of every try (what the
    server reported of each, a try it broke included); raises what opening the stream raised (the
    SDK retried it), what reading it raised when it did not break it, or the last break, leaving
    the usage of the tries in ``tally``."""
    tally = tally if tally is not None else StreamTally()
    attempt = 0
    while True:
        reporter = delta_reporter(action, interval)
        tally.broke = False  # what opening raises is the SDK's (it retried it)
        stream = await open_stream()
        reader = reader_for(reporter)
        failure: AiResponse | Exception
        try:
            try:
                async with stream:
                    response = await read_stream(stream, reader, reporter)
            except Exception:
                tally.usage = tally.usage + _reported_usage(reader)  # what arrived before the break
                raise
            tally.usage = tally.usage + response.usage
            if not response.has_error:
                return replace(response, usage=tally.usage)
            failure = replace(response, usage=tally.usage)  # cut short
        except Exception as error:
            if reporter is not None:
                await reporter.discard()
            if not broken(error):
                raise
            failure, tally.broke = error, True
        else:
            if reporter is not None:
                await reporter.discard()
        if attempt >= retries:
            if isinstance(failure, Exception):
                raise failure
            return failure
        attempt += 1
        reason = failure.error if isinstance(failure, AiResponse) else type(failure).__name__
        logger.info(
            "%s: the stream broke part-way (%s); reading the reply again (%d of %d)",
            action,
            reason,
            attempt,
            retries,
        )
        await sleep(min(_FIRST_BACKOFF * 2 ** (attempt - 1), _LAST_BACKOFF))


def _reported_usage(reader: StreamReader[Any]) -> Usage:
    """The usage the pieces ``reader`` received so far reported (none when it cannot say)."""
    try:
        return reader.response().usage
    except Exception:  # a reader that cannot build a reply from a broken stream
        logger.debug("no usage from a broken stream", exc_info=True)
        return Usage()


class StreamedReplies:
    """The stream settings a processor keeps (:meth:`streams_replies` sets them in its ``__init__``)."""

    _stream: bool = False
    _stream_interval: timedelta = DEFAULT_STREAM_INTERVAL

    def streams_replies(self, stream: bool, interval: float | timedelta | None) -> None:
        """Stream replies (or not), reporting their pieces at most once per ``interval``."""
        self._stream, self._stream_interval = stream, as_stream_interval(interval)

    @property
    def stream(self) -> bool:
        """Whether replies are streamed (and their partial output reported as ``delta`` events)."""
        return self._stream

    @property
    def stream_interval(self) -> timedelta:
        """The least time between two ``delta`` events of one piece of a reply."""
        return self._stream_interval

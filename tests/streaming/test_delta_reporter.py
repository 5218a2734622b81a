"""``DeltaReporter`` on a clock the test turns: the first piece at once, later ones joined until the
interval has passed, each stream (the text, every tool call) its own event, the rest on flush."""

from __future__ import annotations

from datetime import timedelta

import pytest
from streaming_support import KeptEvents

from agentloop.actions import use_step_events
from agentloop.orchestration.llm.stream_deltas import DeltaReporter, as_stream_interval


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_pieces_within_the_interval_are_joined_and_the_rest_is_flushed() -> None:
    clock, sink = Clock(), KeptEvents()
    reporter = DeltaReporter(action="m", interval=timedelta(milliseconds=100), clock=clock)

    with use_step_events(sink, path="p"):
        await reporter.text("Hel")  # the first piece: at once
        clock.now = 0.05
        await reporter.text("lo")
        await reporter.arguments(0, name="plan", call_id="call_1", piece='{"a"')
        clock.now = 0.1  # the interval has passed: everything pending goes, text first
        await reporter.arguments(0, name="plan", call_id="call_1", piece=": 1")
        clock.now = 0.15
        await reporter.arguments(1, name="rank", call_id="call_2", piece="{}")
        await reporter.text(" world")
        await reporter.flush()
        await reporter.flush()  # nothing left: nothing sent

    assert sink.data() == [
        {"seq": 1, "text": "Hel"},
        {"seq": 2, "text": "lo"},
        {"seq": 3, "tool": "plan", "call_id": "call_1", "arguments": '{"a": 1'},
        {"seq": 4, "text": " world"},
        {"seq": 5, "tool": "rank", "call_id": "call_2", "arguments": "{}"},
    ]
    assert reporter.sent == 5


async def test_empty_pieces_send_nothing() -> None:
    sink = KeptEvents()
    reporter = DeltaReporter(action="m", interval=timedelta(0))

    with use_step_events(sink):
        await reporter.text("")
        await reporter.arguments(0, name="plan", call_id="call_1", piece="")
        await reporter.flush()

    assert sink.events == []


def test_an_interval_is_seconds_or_a_timedelta_and_never_negative() -> None:
    assert as_stream_interval(None) == timedelta(milliseconds=100)
    assert as_stream_interval(0.25) == as_stream_interval(timedelta(milliseconds=250))
    with pytest.raises(ValueError, match="must not be negative"):
        as_stream_interval(timedelta(seconds=-1))

"""One turn streamed through the OpenAI processor (the real ``openai`` SDK against the local
server in streaming mode): the same result as unstreamed, and its pieces as ``delta`` events."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta

import pytest
from streaming_support import KeptEvents, send

from agentloop.actions import AiResponse, FunctionCall, Usage
from agentloop.orchestration.llm import stream_deltas
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.testing.servers.openai_server import (
    CompletionReply,
    OpenAICompatibleServer,
    ScriptedToolCall,
    reply_completion,
    reply_text,
    reply_tool_call,
)

TEXT = "Invoices from May: 14 found, 3 overdue, the oldest from the 2nd."
PLAN = {"steps": ["filter by month", "rank by amount", "show the top ten"]}


async def test_a_streamed_text_reply_is_the_reply_sent_whole(
    server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    server.enqueue(reply_text(TEXT, usage=(31, 17)), reply_text(TEXT, usage=(31, 17)))

    streamed = await send(make_processor(), sink=KeptEvents())
    whole = await send(make_processor(stream=False))

    assert (
        streamed
        == whole
        == AiResponse(text=TEXT, usage=Usage(input_tokens=31, output_tokens=17), model="test-model")
    )
    first, second = server.completion_requests
    assert (first["stream"], first["stream_options"]) == (True, {"include_usage": True})
    assert "stream" not in second


async def test_streamed_tool_calls_are_the_calls_sent_whole_with_ids_names_and_raw_arguments(
    server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    raw = '{"steps": ["unterminated'
    reply = CompletionReply(
        content="Planning.",
        tool_calls=(
            ScriptedToolCall(name="plan_search", arguments=json.dumps(PLAN), id="call_a"),
            ScriptedToolCall(name="plan_search", arguments=raw, id="call_b"),
        ),
        usage=(42, 7),
    )
    server.enqueue(reply, reply)

    streamed = await send(make_processor(), forced=True, sink=KeptEvents())
    whole = await send(make_processor(stream=False), forced=True)

    assert (
        streamed
        == whole
        == AiResponse(
            text="Planning.",
            function_calls=(
                FunctionCall(name="plan_search", arguments=json.dumps(PLAN), id="call_a"),
                FunctionCall(name="plan_search", arguments=raw, id="call_b"),
            ),
            usage=Usage(input_tokens=42, output_tokens=7),
            model="test-model",
        )
    )


async def test_a_streamed_forced_call_numbered_by_the_server_equals_the_whole_one_but_its_id(
    server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    server.enqueue(reply_tool_call("plan_search", PLAN), reply_tool_call("plan_search", PLAN))

    streamed = await send(make_processor(), forced=True)
    whole = await send(make_processor(stream=False), forced=True)

    assert [call.id for call in (*streamed.function_calls, *whole.function_calls)] == ["call_1", "call_2"]
    assert streamed.function_calls[0].arguments == whole.function_calls[0].arguments == json.dumps(PLAN)
    assert (streamed.text, streamed.usage, streamed.model) == (whole.text, whole.usage, whole.model)


async def test_deltas_arrive_in_order_and_join_to_the_final_text_and_arguments(
    server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    server.enqueue(reply_completion(content=TEXT, tool_calls=[("plan_search", PLAN)]))
    sink = KeptEvents()

    response = await send(make_processor(stream_interval=0), forced=True, sink=sink)

    assert [event.data["seq"] for event in sink.events] == list(range(1, len(sink.events) + 1))
    assert {(event.action, event.phase, event.path) for event in sink.events} == {
        ("test-model", "delta", "stage/1")
    }
    assert sink.text() == response.text == TEXT
    [call] = response.function_calls
    assert sink.arguments(call.id) == call.arguments
    assert {data["tool"] for data in sink.data() if "tool" in data} == {"plan_search"}
    # with no interval, every chunk of 4 characters is an event: the text's, then the call's
    pieces = [data.get("text") or data.get("arguments") for data in sink.data()]
    assert all(len(piece) <= 4 for piece in pieces)
    assert len(pieces) == -(-len(TEXT) // 4) + -(-len(call.arguments) // 4)


async def test_deltas_faster_than_the_interval_are_joined_into_few_events(
    server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    server.stream_chunk_size = 1  # hundreds of chunks, sent as fast as they go
    long_text = TEXT * 5
    server.enqueue(reply_text(long_text))
    sink = KeptEvents()

    response = await send(make_processor(stream_interval=timedelta(seconds=2)), sink=sink)

    assert response.text == sink.text() == long_text
    # the first piece at once, the rest when the reply ends
    assert [data["text"] for data in sink.data()] == [long_text[0], long_text[1:]]


async def test_chunks_slower_than_the_interval_each_get_an_event(
    server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    server.stream_chunk_size, server.stream_chunk_delay = 5, 0.08
    server.enqueue(reply_text("0123456789" * 2))
    sink = KeptEvents()

    response = await send(make_processor(stream_interval=timedelta(milliseconds=5)), sink=sink)

    assert response.text == sink.text()
    assert [data["text"] for data in sink.data()] == ["01234", "56789"] * 2


async def test_the_default_interval_joins_a_fast_reply_and_the_events_stay_ordered(
    server: OpenAICompatibleServer,
    make_processor: Callable[..., OpenAIProcessor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server.stream_chunk_size = 2
    server.enqueue(reply_text("x" * 120))  # 60 chunks, each 1/16 s after the last on the fake clock
    sink = KeptEvents()
    processor = make_processor()
    ticks: list[float] = []  # the fake clock's readings: one per piece of the reply

    def clock() -> float:
        ticks.append(len(ticks) / 16)
        return ticks[-1]

    def reporter(action: str, interval: timedelta) -> stream_deltas.DeltaReporter:
        return stream_deltas.DeltaReporter(action=action, interval=interval, clock=clock)

    monkeypatch.setattr(stream_deltas, "delta_reporter", reporter)  # stream_reply builds each reply's
    await send(processor, sink=sink)

    assert processor.stream_interval == timedelta(milliseconds=100)
    assert len(ticks) == 60
    # the first piece at once, then one event per 100 ms (two pieces), the rest at the end: not one per chunk
    assert [data["seq"] for data in sink.data()] == list(range(1, 32))
    assert sink.text() == "x" * 120


async def test_nothing_is_built_or_reported_when_nobody_listens(
    server: OpenAICompatibleServer,
    make_processor: Callable[..., OpenAIProcessor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reported: list[object] = []

    async def count(**event: object) -> None:
        reported.append(event)

    monkeypatch.setattr(stream_deltas, "report_step_event", count)
    server.enqueue(reply_text(TEXT), reply_text(TEXT))

    unheard = await send(make_processor(stream_interval=0))
    assert unheard.text == TEXT and reported == []
    assert stream_deltas.delta_reporter("test-model", timedelta(0)) is None

    await send(make_processor(stream_interval=0), sink=KeptEvents())
    assert len(reported) == -(-len(TEXT) // 4)  # the same reply, heard: one report per chunk

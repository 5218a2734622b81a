"""One turn streamed through the Anthropic processor (the real ``anthropic`` SDK against the local
Messages API server in streaming mode): the same result as unstreamed, its pieces as ``delta``
events, and a stream broken part-way as a failure."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from streaming_support import API_KEY, KeptEvents, send

from agentloop.actions import AiResponse, FunctionCall, Usage
from agentloop.orchestration.llm.anthropic.processor import AnthropicProcessor
from agentloop.orchestration.settings import load_settings
from agentloop.orchestration.testing.servers.anthropic_server import (
    AnthropicCompatibleServer,
    reply_broken_stream,
    reply_text,
)
from agentloop.orchestration.testing.servers.openai_replies import CompletionReply, ScriptedToolCall

TEXT = "Invoices from May: 14 found, 3 overdue, the oldest from the 2nd."
PLAN = {"steps": ["filter by month", "rank by amount"]}


async def test_a_streamed_message_is_the_message_sent_whole(
    anthropic_server: AnthropicCompatibleServer, make_anthropic: Callable[..., AnthropicProcessor]
) -> None:
    raw = '{"steps": ["unterminated'
    reply = CompletionReply(
        content=TEXT,
        tool_calls=(
            ScriptedToolCall(name="plan_search", arguments=json.dumps(PLAN), id="toolu_a"),
            ScriptedToolCall(name="plan_search", arguments=raw, id="toolu_b"),
            ScriptedToolCall(name="plan_search", arguments="{}", id="toolu_c"),
        ),
        usage=(40, 9),
    )
    anthropic_server.enqueue(reply, reply)

    streamed = await send(make_anthropic(), forced=True, sink=KeptEvents())
    whole = await send(make_anthropic(stream=False), forced=True)

    assert (
        streamed
        == whole
        == AiResponse(
            text=TEXT,
            function_calls=(
                FunctionCall(name="plan_search", arguments=json.dumps(PLAN), id="toolu_a"),
                FunctionCall(name="plan_search", arguments=raw, id="toolu_b"),
                FunctionCall(name="plan_search", arguments="{}", id="toolu_c"),
            ),
            usage=Usage(input_tokens=40, output_tokens=9),
            model="claude-test",
        )
    )
    assert anthropic_server.message_requests[0]["stream"] is True
    assert "stream" not in anthropic_server.message_requests[1]


async def test_deltas_arrive_in_order_and_join_to_the_text_and_the_input(
    anthropic_server: AnthropicCompatibleServer, make_anthropic: Callable[..., AnthropicProcessor]
) -> None:
    anthropic_server.enqueue(
        CompletionReply(
            content=TEXT, tool_calls=(ScriptedToolCall(name="plan_search", arguments=json.dumps(PLAN)),)
        )
    )
    sink = KeptEvents()

    response = await send(make_anthropic(stream_interval=0), forced=True, sink=sink)

    assert [data["seq"] for data in sink.data()] == list(range(1, len(sink.events) + 1))
    assert {(event.action, event.phase, event.path) for event in sink.events} == {
        ("claude-test", "delta", "stage/1")
    }
    [call] = response.function_calls
    assert sink.text() == response.text == TEXT
    assert sink.arguments(call.id) == call.arguments == json.dumps(PLAN)
    assert len(sink.events) == -(-len(TEXT) // 4) + -(-len(call.arguments) // 4)


async def test_deltas_faster_than_the_interval_are_joined(
    anthropic_server: AnthropicCompatibleServer, make_anthropic: Callable[..., AnthropicProcessor]
) -> None:
    anthropic_server.stream_chunk_size = 1
    anthropic_server.enqueue(reply_text(TEXT))
    sink = KeptEvents()

    await send(make_anthropic(stream_interval=timedelta(seconds=2)), sink=sink)

    assert [data["text"] for data in sink.data()] == [TEXT[0], TEXT[1:]]


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        # the SDK hands the dropped connection on as is or wrapped (timing): the words after vary
        ("disconnect", "anthropic: stream broken: "),
        ("malformed", "anthropic: unreadable stream event: JSONDecodeError"),
        ("error", "anthropic: error event in the stream: Overloaded"),
        ("truncated", "anthropic: the stream ended after 4 event(s) without a stop reason"),
    ],
)
async def test_a_stream_broken_part_way_is_a_failure_after_the_deltas_that_arrived(
    anthropic_server: AnthropicCompatibleServer,
    make_anthropic: Callable[..., AnthropicProcessor],
    fault: Any,
    reason: str,
) -> None:
    # message_start, ping, the text block's start and two pieces: then the fault
    anthropic_server.enqueue(reply_broken_stream(reply_text(TEXT), after_chunks=5, fault=fault))
    sink = KeptEvents()

    response = await send(make_anthropic(stream_interval=0), sink=sink)

    assert response.error is not None and response.error.startswith(reason), response.error
    assert fault != "disconnect" or "peer closed connection" in response.error
    assert (response.text, response.function_calls) == ("", ())
    assert sink.text() == TEXT[:8]
    assert API_KEY not in response.error


def test_the_server_streams_a_message_as_anthropics_events(
    anthropic_server: AnthropicCompatibleServer,
) -> None:
    anthropic_server.enqueue(reply_text("Hi there"))

    response = httpx.post(
        f"{anthropic_server.base_url}/v1/messages",
        headers={"x-api-key": API_KEY, "anthropic-version": "2023-06-01"},
        json={
            "model": "m",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
        },
    )

    assert response.headers["content-type"] == "text/event-stream"
    events = [block.split("\n") for block in response.text.split("\n\n") if block]
    names = [lines[0].removeprefix("event: ") for lines in events]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    datas = [json.loads(lines[1].removeprefix("data: ")) for lines in events]
    assert [data["delta"]["text"] for data in datas if data["type"] == "content_block_delta"] == [
        "Hi t",
        "here",
    ]
    assert datas[-2]["delta"]["stop_reason"] == "end_turn"


def test_the_settings_turn_anthropic_streaming_on() -> None:
    settings = load_settings(
        {
            "AGENTLOOP_MODEL_PROVIDER": "anthropic",
            "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
            "AGENTLOOP_MODEL_STREAM": "true",
            "AGENTLOOP_MODEL_STREAM_INTERVAL_SECONDS": "0.3",
        }
    )

    processor = AnthropicProcessor.from_settings(settings.model)

    assert (processor.stream, processor.stream_interval) == (True, timedelta(seconds=0.3))


class _WrapsTheBreak:
    """The SDK's stream, its dropped connection re-raised as the SDK's ``APIConnectionError`` (as
    the SDK itself does when the break reaches it at another moment): the same break, wrapped."""

    def __init__(self, stream: Any, errors: Any) -> None:
        self._stream, self._errors = stream, errors

    async def __aenter__(self) -> _WrapsTheBreak:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self._stream.__aexit__(*exc_info)

    async def __aiter__(self) -> Any:
        import anthropic

        try:
            async for event in self._stream:
                yield event
        except Exception as error:
            if not self._errors.broke_stream(error):
                raise
            raise anthropic.APIConnectionError(request=self._stream.response.request) from error


async def test_a_dropped_stream_the_sdk_wrapped_reads_as_broken_too(
    anthropic_server: AnthropicCompatibleServer,
    make_anthropic: Callable[..., AnthropicProcessor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under load the SDK sometimes hands the same dropped connection on as its connection error:
    the record must still say the stream broke part-way, not that the request failed (a
    ``make test`` run read "connection error after 1 attempt" here)."""
    anthropic_server.enqueue(reply_broken_stream(reply_text(TEXT), after_chunks=5, fault="disconnect"))
    processor = make_anthropic(stream_interval=0)
    opened = processor._open_stream

    async def open_wrapped(client: Any, body: dict[str, Any]) -> Any:
        return _WrapsTheBreak(await opened(client, body), processor.errors)

    monkeypatch.setattr(processor, "_open_stream", open_wrapped)
    sink = KeptEvents()

    response = await send(processor, sink=sink)

    assert response.error is not None and response.error.startswith("anthropic: stream broken: ")
    assert "peer closed connection" in response.error and "attempt" not in response.error
    assert sink.text() == TEXT[:8]

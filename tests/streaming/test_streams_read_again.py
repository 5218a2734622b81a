"""A stream that breaks part-way (cut short, disconnected) is read again like any transient model
error, up to the processor's ``max_retries``; the deltas of a reply that was abandoned are followed
by a discard event, so a live viewer drops text that did not become a result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from streaming_support import KeptEvents, send

from agentloop.orchestration.llm.anthropic.processor import AnthropicProcessor
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.testing.servers.anthropic_server import AnthropicCompatibleServer
from agentloop.orchestration.testing.servers.openai_server import (
    OpenAICompatibleServer,
    reply_broken_stream,
    reply_text,
)

TEXT = "The first words arrive, then the line goes quiet."


def shown(sink: KeptEvents) -> str:
    """The text a live viewer shows: deltas joined, dropped at each discard event."""
    text = ""
    for data in sink.data():
        text = "" if data.get("discard") else text + str(data.get("text", ""))
    return text


@pytest.mark.parametrize("fault", ["disconnect", "truncated"])
async def test_a_stream_broken_part_way_is_read_again_and_its_deltas_discarded(
    server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor], fault: Any
) -> None:
    server.enqueue(reply_broken_stream(reply_text(TEXT), after_chunks=3, fault=fault), reply_text(TEXT))
    sink = KeptEvents()

    response = await send(make_processor(stream_interval=0, max_retries=1), sink=sink)

    assert (response.has_error, response.text) == (False, TEXT), response.error
    assert len(server.posted("/v1/chat/completions")) == 2
    discards = [data for data in sink.data() if data.get("discard")]
    assert discards == [{"seq": 3, "discard": True}]  # after the first try's two deltas
    assert shown(sink) == TEXT


async def test_a_stream_still_broken_after_the_retries_is_a_failure_whose_deltas_are_discarded(
    server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    broken = reply_broken_stream(reply_text(TEXT), after_chunks=3, fault="disconnect")
    server.enqueue(broken, broken)
    sink = KeptEvents()

    response = await send(make_processor(stream_interval=0, max_retries=1), sink=sink)

    assert response.has_error and "stream broken" in str(response.error)
    assert len(server.posted("/v1/chat/completions")) == 2
    assert [data for data in sink.data() if data.get("discard")] == [{"seq": 3, "discard": True}] * 2
    assert shown(sink) == ""


async def test_a_malformed_stream_is_not_read_again_but_its_deltas_are_discarded(
    server: OpenAICompatibleServer, make_processor: Callable[..., OpenAIProcessor]
) -> None:
    server.enqueue(reply_broken_stream(reply_text(TEXT), after_chunks=3, fault="malformed"), reply_text(TEXT))
    sink = KeptEvents()

    response = await send(make_processor(stream_interval=0, max_retries=1), sink=sink)

    assert response.has_error and "unreadable stream chunk" in str(response.error)
    assert len(server.posted("/v1/chat/completions")) == 1  # not a transient fault
    assert sink.data()[-1] == {"seq": 3, "discard": True} and shown(sink) == ""


async def test_an_anthropic_stream_that_drops_is_read_again(
    anthropic_server: AnthropicCompatibleServer, make_anthropic: Callable[..., AnthropicProcessor]
) -> None:
    anthropic_server.enqueue(reply_broken_stream(reply_text(TEXT), after_chunks=5), reply_text(TEXT))
    sink = KeptEvents()

    response = await send(make_anthropic(stream_interval=0, max_retries=1), sink=sink)

    assert (response.has_error, response.text) == (False, TEXT), response.error
    assert len(anthropic_server.requests) == 2
    assert [data for data in sink.data() if data.get("discard")] == [{"seq": 3, "discard": True}]
    assert shown(sink) == TEXT

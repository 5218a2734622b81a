"""Streaming from the settings: ``AGENTLOOP_MODEL_STREAM`` and its interval reach every OpenAI
processor a deployment builds, the ones sharing a client too."""

from __future__ import annotations

from datetime import timedelta

import pytest
from streaming_support import API_KEY, KeptEvents, send

from agentloop.orchestration.errors import SettingsError
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.llm.provider import ModelProvider, describe_processor
from agentloop.orchestration.settings import load_settings
from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer, reply_text


def test_streaming_is_off_by_default_with_a_100_ms_interval() -> None:
    processor = OpenAIProcessor.from_settings(
        load_settings({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}).model
    )

    assert (processor.stream, processor.stream_interval) == (False, timedelta(milliseconds=100))
    assert "streamed" not in describe_processor(processor)


def test_the_settings_turn_streaming_on_with_their_interval() -> None:
    settings = load_settings(
        {
            "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
            "AGENTLOOP_MODEL_STREAM": "1",
            "AGENTLOOP_MODEL_STREAM_INTERVAL_SECONDS": "0.05",
        }
    )

    processor = OpenAIProcessor.from_settings(settings.model)

    assert (processor.stream, processor.stream_interval) == (True, timedelta(milliseconds=50))
    assert (
        describe_processor(processor)
        == "OpenAI-compatible model gpt-4o-mini at http://127.0.0.1:9/v1/; streamed"
    )


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("AGENTLOOP_MODEL_STREAM", "maybe", "AGENTLOOP_MODEL_STREAM must be 1/true/yes/on or 0/false/no/off"),
        ("AGENTLOOP_MODEL_STREAM_INTERVAL_SECONDS", "-1", "must be a non-negative number"),
    ],
)
def test_a_malformed_stream_setting_is_refused_by_name(variable: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings({variable: value})


def test_a_negative_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="stream_interval must not be negative"):
        OpenAIProcessor(base_url="http://127.0.0.1:9/v1", stream=True, stream_interval=-0.1)


async def test_processors_sharing_a_client_stream_as_the_settings_say(server: OpenAICompatibleServer) -> None:
    settings = load_settings(
        {"OPENAI_API_KEY": API_KEY, "OPENAI_BASE_URL": server.base_url, "AGENTLOOP_MODEL_STREAM": "yes"}
    )
    provider = ModelProvider(settings.model)
    first, second = provider.processor(), provider.processor()
    assert isinstance(first, OpenAIProcessor) and isinstance(second, OpenAIProcessor)
    assert first.client is second.client and first.stream and second.stream
    server.enqueue(reply_text("streamed"))
    sink = KeptEvents()

    response = await send(second, sink=sink)

    assert response.text == sink.text() == "streamed"
    assert server.completion_requests[0]["stream"] is True
    await first.client.close()

"""Building the OpenAI processor: from settings and the environment, without a key, on a given client."""

from __future__ import annotations

from datetime import timedelta

import pytest
from openai import AsyncOpenAI
from openai_support import API_KEY, send
from pydantic import SecretStr

from agentloop.actions import ModelProcessor
from agentloop.orchestration.llm.openai.processor import DEFAULT_MODEL, OpenAIProcessor
from agentloop.orchestration.settings import ModelSettings
from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer


async def test_from_env_reads_the_environment(
    openai_server: OpenAICompatibleServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("OPENAI_MODEL", "local-model")
    monkeypatch.setenv("OPENAI_TIMEOUT_SECONDS", "2.5")
    monkeypatch.setenv("OPENAI_MAX_RETRIES", "1")

    processor = OpenAIProcessor.from_env()
    try:
        assert processor.model == "local-model"
        assert processor.timeout == timedelta(seconds=2.5)
        assert processor.max_retries == 1
        assert processor.base_url.rstrip("/") == openai_server.base_url
        response = await send(processor)
    finally:
        await processor.aclose()

    assert response.model == "local-model" and response.text == "ok"
    [request] = openai_server.requests
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.body["model"] == "local-model"


def test_from_env_defaults() -> None:
    processor = OpenAIProcessor.from_env({"OPENAI_API_KEY": API_KEY})

    assert processor.model == DEFAULT_MODEL == "gpt-4o-mini"
    assert processor.timeout == timedelta(seconds=60)
    assert processor.max_retries == 3
    assert processor.base_url == "https://api.openai.com/v1/"
    assert API_KEY not in repr(processor)


def test_from_env_rejects_bad_settings_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="API key is required"):
        OpenAIProcessor.from_env()
    with pytest.raises(ValueError, match="OPENAI_TIMEOUT_SECONDS"):
        OpenAIProcessor.from_env({"OPENAI_API_KEY": API_KEY, "OPENAI_TIMEOUT_SECONDS": "soon"})
    with pytest.raises(ValueError, match="OPENAI_MAX_RETRIES"):
        OpenAIProcessor.from_env({"OPENAI_API_KEY": API_KEY, "OPENAI_MAX_RETRIES": "-1"})


async def test_a_local_server_needs_no_key(openai_server: OpenAICompatibleServer) -> None:
    processor = OpenAIProcessor.from_env({"OPENAI_BASE_URL": openai_server.base_url})
    try:
        assert (await send(processor)).text == "ok"
    finally:
        await processor.aclose()
    assert openai_server.requests[0].headers["authorization"].startswith("Bearer ")


async def test_an_existing_client_can_be_reused_and_is_not_closed(
    openai_server: OpenAICompatibleServer,
) -> None:
    client = AsyncOpenAI(api_key=API_KEY, base_url=openai_server.base_url, max_retries=0)
    processor = OpenAIProcessor(client=client, model="test-model", timeout=timedelta(seconds=3))
    assert isinstance(processor, ModelProcessor)
    checked: ModelProcessor = processor

    response = await checked.send_request(
        instruction="hi",
        tools=[],
        tool_choices=None,
        history_messages=[],
        documents=[],
        files=[],
        is_auto_handle_function_call=True,
    )
    await processor.aclose()

    assert response.text == "ok"
    assert processor.timeout == timedelta(seconds=3) and processor.max_retries == 0
    assert not client.is_closed()
    await client.close()
    with pytest.raises(ValueError, match="either client"):
        OpenAIProcessor(client=client, api_key="other")


def test_from_settings_takes_the_model_settings_and_hides_the_key() -> None:
    settings = ModelSettings(
        openai_api_key=SecretStr(API_KEY),
        openai_base_url="http://127.0.0.1:9/v1",
        openai_model="m2",
        openai_timeout_seconds=7,
        openai_max_retries=0,
    )

    processor = OpenAIProcessor.from_settings(settings, temperature=0.5)

    assert (processor.model, processor.temperature, processor.max_retries) == ("m2", 0.5, 0)
    assert processor.timeout == timedelta(seconds=7)
    assert processor.base_url == "http://127.0.0.1:9/v1/"
    assert processor.client.api_key == API_KEY
    assert API_KEY not in repr(settings) and API_KEY not in repr(processor)

"""Fixtures of the streaming tests: the local OpenAI- and Anthropic-protocol servers, processors for them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from streaming_support import API_KEY

from agentloop.orchestration.llm.anthropic.processor import AnthropicProcessor
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.testing.servers.anthropic_server import AnthropicCompatibleServer
from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer


@pytest.fixture
def server() -> Iterator[OpenAICompatibleServer]:
    """A running :class:`OpenAICompatibleServer` (chunks of 4 characters, no delay)."""
    with OpenAICompatibleServer(api_key=API_KEY) as running:
        yield running


@pytest.fixture
async def make_processor(server: OpenAICompatibleServer) -> AsyncIterator[Callable[..., OpenAIProcessor]]:
    """Processors pointed at the server (closed after the test); ``stream=True`` unless told."""
    made: list[OpenAIProcessor] = []

    def make(**options: Any) -> OpenAIProcessor:
        settings: dict[str, Any] = {
            "api_key": API_KEY,
            "base_url": server.base_url,
            "model": "test-model",
            "timeout": 5.0,
            "max_retries": 0,
            "stream": True,
        }
        processor = OpenAIProcessor(**{**settings, **options})
        made.append(processor)
        return processor

    yield make
    for processor in made:
        await processor.aclose()


@pytest.fixture
def anthropic_server() -> Iterator[AnthropicCompatibleServer]:
    """A running :class:`AnthropicCompatibleServer` (pieces of 4 characters, no delay)."""
    with AnthropicCompatibleServer(api_key=API_KEY) as running:
        yield running


@pytest.fixture
async def make_anthropic(
    anthropic_server: AnthropicCompatibleServer,
) -> AsyncIterator[Callable[..., AnthropicProcessor]]:
    """Anthropic processors pointed at the server (closed after the test); ``stream=True`` unless told."""
    made: list[AnthropicProcessor] = []

    def make(**options: Any) -> AnthropicProcessor:
        settings: dict[str, Any] = {
            "api_key": API_KEY,
            "base_url": anthropic_server.base_url,
            "model": "claude-test",
            "timeout": 5.0,
            "max_retries": 0,
            "stream": True,
        }
        processor = AnthropicProcessor(**{**settings, **options})
        made.append(processor)
        return processor

    yield make
    for processor in made:
        await processor.aclose()

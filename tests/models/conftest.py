"""Fixtures of the model-processor tests: local OpenAI- and Anthropic-wire servers, processors for them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from anthropic_support import ANTHROPIC_KEY
from openai_support import API_KEY

from agentloop.orchestration.llm.anthropic.processor import AnthropicProcessor
from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.testing.servers.anthropic_server import AnthropicCompatibleServer
from agentloop.orchestration.testing.servers.openai_server import OpenAICompatibleServer


@pytest.fixture
def openai_server() -> Iterator[OpenAICompatibleServer]:
    """A running :class:`OpenAICompatibleServer`, stopped after the test."""
    with OpenAICompatibleServer() as server:
        yield server


@pytest.fixture
async def make_processor(
    openai_server: OpenAICompatibleServer,
) -> AsyncIterator[Callable[..., OpenAIProcessor]]:
    """Processors pointed at the test server (closed after the test)."""
    made: list[OpenAIProcessor] = []

    def make(**options: Any) -> OpenAIProcessor:
        settings: dict[str, Any] = {
            "api_key": API_KEY,
            "base_url": openai_server.base_url,
            "model": "test-model",
            "timeout": 5.0,
            "max_retries": 0,
        }
        settings.update(options)
        processor = OpenAIProcessor(**settings)
        made.append(processor)
        return processor

    yield make
    for processor in made:
        await processor.aclose()


@pytest.fixture
def anthropic_server() -> Iterator[AnthropicCompatibleServer]:
    """A running :class:`AnthropicCompatibleServer`, stopped after the test."""
    with AnthropicCompatibleServer() as server:
        yield server


@pytest.fixture
async def make_anthropic(
    anthropic_server: AnthropicCompatibleServer,
) -> AsyncIterator[Callable[..., AnthropicProcessor]]:
    """Anthropic processors pointed at the test server (closed after the test)."""
    made: list[AnthropicProcessor] = []

    def make(**options: Any) -> AnthropicProcessor:
        settings: dict[str, Any] = {
            "api_key": ANTHROPIC_KEY,
            "base_url": anthropic_server.base_url,
            "model": "claude-test",
            "timeout": 5.0,
            "max_retries": 0,
        }
        processor = AnthropicProcessor(**{**settings, **options})
        made.append(processor)
        return processor

    yield make
    for processor in made:
        await processor.aclose()

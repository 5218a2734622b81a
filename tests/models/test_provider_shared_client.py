"""One SDK client per event loop: a provider's processors share it, wherever they were built."""

from __future__ import annotations

import asyncio

from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
from agentloop.orchestration.llm.provider import ModelProvider
from agentloop.orchestration.settings import load_settings


def _provider() -> ModelProvider:
    return ModelProvider(load_settings({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}).model)


def test_processors_on_one_loop_share_one_client_and_closing_one_keeps_it_open() -> None:
    provider = _provider()

    async def two() -> tuple[OpenAIProcessor, OpenAIProcessor]:
        first, second = provider.processor(), provider.processor()
        assert isinstance(first, OpenAIProcessor) and isinstance(second, OpenAIProcessor)
        await first.aclose()
        assert not second.client.is_closed()
        return first, second

    first, second = asyncio.run(two())
    assert first is not second
    assert first.client is second.client
    assert first.model == second.model == provider.model_name


def test_each_loop_has_its_own_client_and_processors_built_outside_a_loop_share_them() -> None:
    provider = _provider()

    async def one() -> object:
        processor = provider.processor()
        assert isinstance(processor, OpenAIProcessor)
        return processor.client

    on_first, on_second = asyncio.run(one()), asyncio.run(one())
    assert on_first is not on_second
    outside_a, outside_b = provider.processor(), provider.processor()
    assert isinstance(outside_a, OpenAIProcessor) and isinstance(outside_b, OpenAIProcessor)

    async def clients() -> tuple[object, object]:
        return outside_a.client, outside_b.client

    client_a, client_b = asyncio.run(clients())
    assert client_a is client_b

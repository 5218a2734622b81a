"""One OpenAI client per event loop: processors built on a loop share it; outside a loop each has its own."""

from __future__ import annotations

import asyncio

from agentloop.orchestration.llm.openai_processor import OpenAIProcessor
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


def test_each_loop_has_its_own_client_and_no_loop_means_a_client_of_its_own() -> None:
    provider = _provider()

    async def one() -> OpenAIProcessor:
        processor = provider.processor()
        assert isinstance(processor, OpenAIProcessor)
        return processor

    on_first, on_second = asyncio.run(one()), asyncio.run(one())
    assert on_first.client is not on_second.client
    outside_a, outside_b = provider.processor(), provider.processor()
    assert isinstance(outside_a, OpenAIProcessor) and isinstance(outside_b, OpenAIProcessor)
    assert outside_a.client is not outside_b.client

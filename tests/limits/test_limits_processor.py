"""``RateLimitedProcessor``: a slot before each call, usage after it, failures as values."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from workflows.limits import TOOL_ID, ModelCalls, StaticToolStore

from agentloop.actions import AiResponse, ModelRequest, RunDeadlineExceededError, Usage
from agentloop.loops import InlineAgentRunner
from agentloop.orchestration.llm.limits import (
    MemoryBackend,
    Permit,
    RateLimitedProcessor,
    WindowRateLimiter,
    current_permit,
)
from agentloop.testing import ScriptedModel, text_reply

REQUEST = ModelRequest(instruction="say hi")


class CountingModel:
    """A processor that answers at once with a fixed usage and remembers each call's permit."""

    def __init__(self, usage: Usage | None = None) -> None:
        self.usage = usage or Usage(input_tokens=30, output_tokens=20)
        self.permits: list[Permit | None] = []

    async def send_request(self, **request: Any) -> AiResponse:
        self.permits.append(current_permit())
        return AiResponse(text="hi", usage=self.usage, model="counting")


async def test_the_processor_takes_a_slot_per_call_records_usage_and_exposes_the_permit() -> None:
    inner = CountingModel()
    limiter = WindowRateLimiter(MemoryBackend(), requests_per_minute=10, tokens_per_minute=1000, window=60)
    processor = RateLimitedProcessor(inner, limiter)

    responses = [await REQUEST.send(processor) for _ in range(3)]

    assert all(not response.has_error for response in responses)
    assert [permit.requests for permit in inner.permits if permit is not None] == [1, 2, 3]
    assert limiter.usage()[1:] == (3, 150)
    assert current_permit() is None  # only while the inner call runs
    assert processor.model == ""  # CountingModel has no model attribute


async def test_a_call_that_would_wait_longer_than_max_wait_is_a_clear_failure_without_calling_the_model(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inner = CountingModel()
    limiter = WindowRateLimiter(MemoryBackend(), requests_per_minute=1, window=60)
    processor = RateLimitedProcessor(inner, limiter, max_wait=timedelta(milliseconds=100))
    await REQUEST.send(processor)

    with caplog.at_level(logging.WARNING, logger="agentloop.orchestration.llm.limits"):
        response = await REQUEST.send(processor)

    assert response.has_error
    assert response.error is not None and response.error.startswith("rate limit: no request slot within")
    assert "max_wait 0.1s" in response.error
    assert len(inner.permits) == 1
    assert "rate limit" in caplog.text


async def test_the_token_limit_makes_the_next_call_wait_for_the_next_window() -> None:
    inner = CountingModel(Usage(input_tokens=70, output_tokens=40))
    limiter = WindowRateLimiter(MemoryBackend(), tokens_per_minute=100, window=0.2, max_wait=2)
    processor = RateLimitedProcessor(inner, limiter)

    await REQUEST.send(processor)  # 110 tokens: the window is spent
    await REQUEST.send(processor)

    first, second = inner.permits
    assert first is not None and second is not None
    assert second.window > first.window
    assert second.waited > 0


class BrokenLimiter:
    async def acquire(self, *, max_wait: Any = None) -> Permit:
        raise RuntimeError("limiter bug")

    async def record(self, tokens: int) -> None:
        raise RuntimeError("limiter bug")

    def describe(self) -> str:
        return "broken"


async def test_a_limiter_that_fails_unexpectedly_lets_the_call_proceed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inner = CountingModel()
    processor = RateLimitedProcessor(inner, BrokenLimiter())

    with caplog.at_level(logging.WARNING):
        response = await REQUEST.send(processor)

    assert not response.has_error
    assert inner.permits == [None]
    assert "proceeds unlimited" in caplog.text
    assert "could not record usage" in caplog.text


def test_the_processor_wraps_only_processors() -> None:
    limiter = WindowRateLimiter(MemoryBackend(), requests_per_minute=1)
    with pytest.raises(TypeError):
        RateLimitedProcessor(object(), limiter)  # type: ignore[arg-type]


class WatchedLimiter:
    """A limiter that tells how each wait for a slot ended: granted, or cancelled while waiting."""

    def __init__(self, inner: WindowRateLimiter) -> None:
        self.inner = inner
        self.waits: list[str] = []

    async def acquire(self, *, max_wait: timedelta | float | None = None) -> Permit:
        try:
            permit = await self.inner.acquire(max_wait=max_wait)
        except asyncio.CancelledError:
            self.waits.append("cancelled")
            raise
        self.waits.append("granted")
        return permit

    async def record(self, tokens: int) -> None:
        await self.inner.record(tokens)


async def test_a_run_deadline_interrupts_a_wait_for_a_slot() -> None:
    # the second call's slot is 60 s away and max_wait allows 120 s: only the deadline ends the wait
    limiter = WatchedLimiter(
        WindowRateLimiter(MemoryBackend(), requests_per_minute=1, window=60, max_wait=120)
    )
    processor = RateLimitedProcessor(CountingModel(), limiter)
    context = SimpleNamespace(processor=processor, tool_store=StaticToolStore(), tool_id=TOOL_ID)
    runner = InlineAgentRunner.create(runnable=ModelCalls, context=context)

    with pytest.raises(RunDeadlineExceededError):
        await runner.request(input={"branch": "b0", "calls": 2}, deadline=timedelta(seconds=0.3))

    assert limiter.waits == ["granted", "cancelled"]


async def test_the_inner_processor_receives_the_request_unchanged() -> None:
    inner = ScriptedModel([text_reply("hi")])
    processor = RateLimitedProcessor(inner, WindowRateLimiter(MemoryBackend(), requests_per_minute=5))
    request = ModelRequest(
        instruction="Plan the search.",
        tools=({"name": "search", "description": "Search.", "parameters": {"type": "object"}},),
        tool_choices=({"name": "search"},),
        history_messages=({"role": "user", "content": "hi"},),
        documents=("a document",),
        files=("f.txt",),
        is_auto_handle_function_call=True,
    )

    response = await request.send(processor)

    assert response.text == "hi"
    assert inner.requests == [request]

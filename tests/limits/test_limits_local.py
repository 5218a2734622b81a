"""The in-process limiter, the rate-limited processor, and picking a processor from the environment."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from limits_workflows import TOOL_ID, ModelCalls, StaticToolStore

from actions import AiResponse, RunDeadlineExceededError, Usage
from loops import InlineAgentRunner
from orchestration.llm import (
    LocalRateLimiter,
    OfflineModel,
    OpenAIProcessor,
    Permit,
    RateLimitedProcessor,
    RateLimitTimeoutError,
    RedisRateLimiter,
    current_permit,
    describe_processor,
    limit_key,
    processor_from_env,
)
from orchestration.llm.limits import Denial, redact_url

REQUEST: dict[str, Any] = {
    "instruction": "say hi",
    "tools": [],
    "tool_choices": None,
    "history_messages": [],
    "documents": [],
    "files": [],
    "is_auto_handle_function_call": False,
}


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class CountingModel:
    """A processor that answers at once with a fixed usage and remembers each call's permit."""

    def __init__(self, usage: Usage | None = None) -> None:
        self.usage = usage or Usage(input_tokens=30, output_tokens=20)
        self.permits: list[Permit | None] = []

    async def send_request(self, **request: Any) -> AiResponse:
        self.permits.append(current_permit())
        return AiResponse(text="hi", usage=self.usage, model="counting")


# ----- LocalRateLimiter ---------------------------------------------------------------------------


async def test_a_window_grants_at_most_the_request_limit_then_the_next_window_grants_again() -> None:
    clock = FakeClock(1000.2)
    limiter = LocalRateLimiter(requests_per_minute=3, window=timedelta(seconds=1), clock=clock)

    granted = [await limiter.try_acquire() for _ in range(5)]

    assert [isinstance(outcome, Permit) for outcome in granted] == [True, True, True, False, False]
    denial = granted[3]
    assert isinstance(denial, Denial)
    assert denial.reason == "requests"
    assert denial.window == 1000
    assert denial.retry_after == pytest.approx(0.8)
    clock.now = 1001.0
    again = await limiter.try_acquire()
    assert isinstance(again, Permit)
    assert (again.window, again.requests) == (1001, 1)


async def test_the_token_limit_stops_new_calls_once_the_windows_tokens_reach_it() -> None:
    clock = FakeClock(50.0)
    limiter = LocalRateLimiter(tokens_per_minute=100, window=10, clock=clock)

    first = await limiter.try_acquire()
    await limiter.record(60)
    second = await limiter.try_acquire()  # 60 < 100: allowed
    await limiter.record(60)  # a call in flight may take the window past the limit
    third = await limiter.try_acquire()

    assert isinstance(first, Permit) and isinstance(second, Permit)
    assert second.tokens == 60
    assert isinstance(third, Denial)
    assert third.reason == "tokens"
    assert limiter.usage() == (5, 2, 120)
    clock.now = 60.0
    assert isinstance(await limiter.try_acquire(), Permit)
    assert limiter.usage() == (6, 1, 0)


async def test_concurrent_callers_in_threads_and_tasks_never_get_more_than_the_limit_per_window() -> None:
    limiter = LocalRateLimiter(requests_per_minute=4, window=0.25, max_wait=5)
    windows: list[int] = []
    lock = threading.Lock()

    async def caller(calls: int) -> None:
        for _ in range(calls):
            permit = await limiter.acquire()
            with lock:
                windows.append(permit.window)

    async def thread_callers() -> None:
        await asyncio.wait_for(asyncio.gather(*(caller(2) for _ in range(3))), 10)

    def thread_main() -> None:
        asyncio.run(thread_callers())

    threads = [threading.Thread(target=thread_main) for _ in range(2)]
    for thread in threads:
        thread.start()
    await asyncio.gather(*(caller(2) for _ in range(2)))
    for thread in threads:
        thread.join(10)

    per_window = Counter(windows)
    assert len(windows) == 16
    assert max(per_window.values()) <= 4
    assert len(per_window) >= 4  # 16 requests at 4 a window need at least 4 windows


async def test_acquire_fails_at_once_when_the_next_window_is_further_than_max_wait() -> None:
    limiter = LocalRateLimiter(requests_per_minute=1, window=timedelta(seconds=30), max_wait=0.2)
    await limiter.acquire()

    started = time.monotonic()
    with pytest.raises(RateLimitTimeoutError) as caught:
        await limiter.acquire()

    assert time.monotonic() - started < 0.1  # it did not sleep in vain
    assert caught.value.reason == "requests"
    assert "max_wait 0.2s" in str(caught.value)
    assert "1 requests per 30s window" in str(caught.value)


async def test_acquire_waits_for_the_next_window_when_it_is_within_max_wait() -> None:
    limiter = LocalRateLimiter(requests_per_minute=1, window=0.2, max_wait=1)
    first = await limiter.acquire()

    second = await limiter.acquire()

    assert second.window > first.window
    assert 0 < second.waited < 0.5


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"requests_per_minute": 0},
        {"tokens_per_minute": -5},
        {"requests_per_minute": 2.5},
        {"requests_per_minute": True},
        {"requests_per_minute": 1, "window": 0},
        {"requests_per_minute": 1, "max_wait": -1},
        {"requests_per_minute": 1, "key": ""},
    ],
)
def test_bad_limits_are_rejected(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        LocalRateLimiter(**options)


def test_a_redis_limiter_needs_a_url_and_connects_only_when_used() -> None:
    with pytest.raises(ValueError):
        RedisRateLimiter("", requests_per_minute=1)
    limiter = RedisRateLimiter("redis://127.0.0.1:1/0", requests_per_minute=1)  # nothing listens there
    assert limiter.key == "agentloop:ratelimit:default"
    assert limit_key("gpt-4o") == "agentloop:ratelimit:gpt-4o"


# ----- RateLimitedProcessor -------------------------------------------------------------------------


async def test_the_processor_takes_a_slot_per_call_records_usage_and_exposes_the_permit() -> None:
    inner = CountingModel()
    limiter = LocalRateLimiter(requests_per_minute=10, tokens_per_minute=1000, window=60)
    processor = RateLimitedProcessor(inner, limiter)

    responses = [await processor.send_request(**REQUEST) for _ in range(3)]

    assert all(not response.has_error for response in responses)
    assert [permit.requests for permit in inner.permits if permit is not None] == [1, 2, 3]
    assert limiter.usage()[1:] == (3, 150)
    assert current_permit() is None  # only while the inner call runs
    assert processor.model == ""  # CountingModel has no model attribute


async def test_a_call_that_would_wait_longer_than_max_wait_is_a_clear_failure_without_calling_the_model(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inner = CountingModel()
    limiter = LocalRateLimiter(requests_per_minute=1, window=60)
    processor = RateLimitedProcessor(inner, limiter, max_wait=timedelta(milliseconds=100))
    await processor.send_request(**REQUEST)

    with caplog.at_level(logging.WARNING, logger="orchestration.llm.limits"):
        response = await processor.send_request(**REQUEST)

    assert response.has_error
    assert response.error is not None and response.error.startswith("rate limit: no request slot within")
    assert "max_wait 0.1s" in response.error
    assert len(inner.permits) == 1
    assert "rate limit" in caplog.text


async def test_the_token_limit_makes_the_next_call_wait_for_the_next_window() -> None:
    inner = CountingModel(Usage(input_tokens=70, output_tokens=40))
    limiter = LocalRateLimiter(tokens_per_minute=100, window=0.2, max_wait=2)
    processor = RateLimitedProcessor(inner, limiter)

    await processor.send_request(**REQUEST)  # 110 tokens: the window is spent
    await processor.send_request(**REQUEST)

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
        response = await processor.send_request(**REQUEST)

    assert not response.has_error
    assert inner.permits == [None]
    assert "proceeds unlimited" in caplog.text
    assert "could not record usage" in caplog.text


def test_the_processor_wraps_only_processors() -> None:
    with pytest.raises(TypeError):
        RateLimitedProcessor(object(), LocalRateLimiter(requests_per_minute=1))


# ----- processor_from_env and describe_processor -----------------------------------------------------


def test_without_a_key_or_base_url_the_processor_is_the_offline_model() -> None:
    processor = processor_from_env({"OPENAI_API_KEY": "  ", "OPENAI_MODEL": "gpt-4o"})

    assert isinstance(processor, OfflineModel)
    assert describe_processor(processor) == "offline (deterministic, no API key)"


def test_a_key_or_a_base_url_selects_the_openai_processor_and_its_description_hides_secrets() -> None:
    keyed = processor_from_env({"OPENAI_API_KEY": "sk-secretsecretsecret", "OPENAI_MODEL": "gpt-4.1"})
    local = processor_from_env({"OPENAI_BASE_URL": "http://user:pw@127.0.0.1:8080/v1?token=abc"})

    assert isinstance(keyed, OpenAIProcessor) and isinstance(local, OpenAIProcessor)
    assert describe_processor(keyed) == "OpenAI-compatible model gpt-4.1 at https://api.openai.com/v1/"
    description = describe_processor(local)
    assert description == "OpenAI-compatible model gpt-4o-mini at http://127.0.0.1:8080/v1/"
    assert "pw" not in description and "token" not in description


def test_rpm_and_tpm_wrap_the_processor_in_a_limiter_shared_by_processors_with_the_same_settings() -> None:
    env = {
        "AGENTLOOP_MODEL_RPM": "30",
        "AGENTLOOP_MODEL_TPM": "9000",
        "AGENTLOOP_MODEL_LIMIT_NAME": "t-local",
    }

    first, second = processor_from_env(env), processor_from_env(env)
    other = processor_from_env({**env, "AGENTLOOP_MODEL_RPM": "31"})

    assert isinstance(first, RateLimitedProcessor) and isinstance(second, RateLimitedProcessor)
    assert isinstance(first.inner, OfflineModel)
    assert isinstance(first.limiter, LocalRateLimiter)
    assert first.limiter is second.limiter
    assert isinstance(other, RateLimitedProcessor) and other.limiter is not first.limiter
    assert (first.limiter.requests_per_minute, first.limiter.tokens_per_minute) == (30, 9000)
    assert first.limiter.window == 60 and first.limiter.max_wait == 120
    assert describe_processor(first) == (
        "offline (deterministic, no API key); rate-limited: 30 requests and 9000 tokens per 60s window, "
        "in-process agentloop:ratelimit:t-local"
    )


def test_with_redis_url_the_limit_is_shared_through_redis_and_named_after_the_model() -> None:
    processor = processor_from_env(
        {
            "OPENAI_API_KEY": "sk-secretsecretsecret",
            "OPENAI_MODEL": "gpt-4o",
            "REDIS_URL": "redis://:hunter2@redis.internal:6380/2",
            "AGENTLOOP_MODEL_TPM": "1000",
            "AGENTLOOP_MODEL_LIMIT_WINDOW_SECONDS": "0.5",
            "AGENTLOOP_MODEL_LIMIT_MAX_WAIT_SECONDS": "3",
        }
    )

    assert isinstance(processor, RateLimitedProcessor)
    limiter = processor.limiter
    assert isinstance(limiter, RedisRateLimiter)
    assert (limiter.key, limiter.requests_per_minute, limiter.tokens_per_minute) == (
        "agentloop:ratelimit:gpt-4o",
        None,
        1000,
    )
    assert (limiter.window, limiter.max_wait) == (0.5, 3)
    description = describe_processor(processor)
    assert description == (
        "OpenAI-compatible model gpt-4o at https://api.openai.com/v1/; rate-limited: 1000 tokens per "
        "0.5s window, redis redis://redis.internal:6380/2 key agentloop:ratelimit:gpt-4o"
    )
    assert "hunter2" not in description and "sk-" not in description


@pytest.mark.parametrize(
    "env",
    [
        {"AGENTLOOP_MODEL_RPM": "ten"},
        {"AGENTLOOP_MODEL_RPM": "0"},
        {"AGENTLOOP_MODEL_TPM": "-3"},
        {"AGENTLOOP_MODEL_RPM": "5", "AGENTLOOP_MODEL_LIMIT_WINDOW_SECONDS": "0"},
        {"AGENTLOOP_MODEL_RPM": "5", "AGENTLOOP_MODEL_LIMIT_MAX_WAIT_SECONDS": "soon"},
    ],
)
def test_malformed_limit_settings_are_clear_errors(env: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="AGENTLOOP_MODEL_"):
        processor_from_env(env)


def test_unknown_processors_are_described_by_class_and_model() -> None:
    class Custom:
        model = "my-model"

    assert describe_processor(Custom()) == "Custom (my-model)"
    assert describe_processor(object()) == "object"
    assert redact_url("redis://:pw@host:1/0") == "redis://host:1/0"


async def test_a_run_deadline_interrupts_a_wait_for_a_slot() -> None:
    limiter = LocalRateLimiter(requests_per_minute=1, window=60, max_wait=120)
    processor = RateLimitedProcessor(CountingModel(), limiter)
    context = SimpleNamespace(processor=processor, tool_store=StaticToolStore(), tool_id=TOOL_ID)
    runner = InlineAgentRunner.create(runnable=ModelCalls, context=context)

    started = time.monotonic()
    with pytest.raises(RunDeadlineExceededError):
        await runner.request(input={"branch": "b0", "calls": 2}, deadline=timedelta(seconds=0.3))

    assert time.monotonic() - started < 2

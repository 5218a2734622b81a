"""The fixed-window algorithm on the memory backend: slots per window, tokens, waiting, settings."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from agentloop.orchestration.errors import RateLimitTimeoutError
from agentloop.orchestration.llm.limits import (
    Denial,
    MemoryBackend,
    Permit,
    RedisBackend,
    WindowRateLimiter,
    limit_key,
)


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_a_window_grants_at_most_the_request_limit_then_the_next_window_grants_again() -> None:
    clock = FakeClock(1000.2)
    limiter = WindowRateLimiter(
        MemoryBackend(clock=clock), requests_per_minute=3, window=timedelta(seconds=1)
    )

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
    limiter = WindowRateLimiter(MemoryBackend(clock=clock), tokens_per_minute=100, window=10)

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
    limiter = WindowRateLimiter(MemoryBackend(), requests_per_minute=4, window=0.25, max_wait=5)
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


async def test_acquire_fails_at_once_when_the_next_window_is_further_than_max_wait(
    limiter_sleeps: list[float],
) -> None:
    limiter = WindowRateLimiter(
        MemoryBackend(), requests_per_minute=1, window=timedelta(seconds=30), max_wait=0.2
    )
    await limiter.acquire()

    with pytest.raises(RateLimitTimeoutError) as caught:
        await limiter.acquire()

    assert limiter_sleeps == []  # it did not sleep in vain
    assert caught.value.reason == "requests"
    assert "max_wait 0.2s" in str(caught.value)
    assert "1 requests per 30s window" in str(caught.value)


async def test_acquire_waits_for_the_next_window_when_it_is_within_max_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock, slept = FakeClock(1000.1), list[float]()

    async def sleep(seconds: float) -> None:  # the limiter's sleeps pass on the backend's clock
        slept.append(seconds)
        clock.now += seconds

    monkeypatch.setattr("agentloop.orchestration.llm.limits.window.asyncio", SimpleNamespace(sleep=sleep))
    limiter = WindowRateLimiter(MemoryBackend(clock=clock), requests_per_minute=1, window=0.2, max_wait=1)
    first = await limiter.acquire()

    second = await limiter.acquire()

    assert second.window == first.window + 1
    # one sleep: to the next window (0.1 s away), with at most 2 % of a window of jitter
    assert len(slept) == 1 and 0.1 - 1e-9 <= slept[0] <= 0.1 + 0.02 * 0.2 + 1e-9, slept


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
        WindowRateLimiter(MemoryBackend(), **options)


def test_a_redis_backend_needs_a_url_and_connects_only_when_used() -> None:
    with pytest.raises(ValueError):
        RedisBackend("")
    limiter = WindowRateLimiter(RedisBackend("redis://127.0.0.1:1/0"), requests_per_minute=1)  # nothing there
    assert limiter.key == "agentloop:ratelimit:default"
    assert limit_key("gpt-4o") == "agentloop:ratelimit:gpt-4o"


async def test_limiters_with_one_key_on_one_backend_share_the_limit_and_other_keys_do_not() -> None:
    backend = MemoryBackend(clock=FakeClock(7.5))
    first, second = (WindowRateLimiter(backend, key=limit_key("a"), requests_per_minute=2) for _ in range(2))
    other = WindowRateLimiter(backend, key=limit_key("b"), requests_per_minute=2)

    outcomes = [await limiter.try_acquire() for limiter in (first, second, first, other)]

    assert [type(outcome).__name__ for outcome in outcomes] == ["Permit", "Permit", "Denial", "Permit"]
    assert second.describe() == "2 requests per 60s window, in-process agentloop:ratelimit:a"
    assert repr(other) == "<WindowRateLimiter 2 requests per 60s window, in-process agentloop:ratelimit:b>"

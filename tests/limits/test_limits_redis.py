"""The Redis limiter on a private redis-server: one limit for every caller, in any process."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
import textwrap
import threading
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentloop.actions import AiResponse, ModelRequest, Usage
from agentloop.orchestration.llm.limits import (
    Denial,
    Permit,
    RateLimitedProcessor,
    RedisBackend,
    WindowRateLimiter,
    current_permit,
)
from tests.services.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

REQUEST = ModelRequest(instruction="say hi")


def fresh_key() -> str:
    return f"agentloop:ratelimit:test-{uuid.uuid4().hex[:10]}"


class FixedUsageModel:
    def __init__(self, usage: Usage) -> None:
        self.usage = usage
        self.permits: list[Permit | None] = []

    async def send_request(self, **request: Any) -> AiResponse:
        self.permits.append(current_permit())
        return AiResponse(text="ok", usage=self.usage)


async def test_concurrent_callers_on_separate_clients_never_get_more_than_the_limit_per_window(
    redis_server: RedisServer,
) -> None:
    key, limit = fresh_key(), 3
    windows: list[int] = []
    lock = threading.Lock()

    def limiter() -> WindowRateLimiter:  # each one its own connection pool, as separate processes have
        backend = RedisBackend(redis_server.url)
        return WindowRateLimiter(backend, key=key, requests_per_minute=limit, window=0.4, max_wait=10)

    async def caller(limiter: WindowRateLimiter, calls: int) -> None:
        for _ in range(calls):
            permit = await limiter.acquire()
            assert permit.enforced
            with lock:
                windows.append(permit.window)

    async def thread_callers() -> None:
        shared = limiter()
        await asyncio.gather(*(caller(shared, 2) for _ in range(3)))

    threads = [threading.Thread(target=asyncio.run, args=(thread_callers(),)) for _ in range(2)]
    for thread in threads:
        thread.start()
    await asyncio.gather(*(caller(limiter(), 2) for _ in range(3)))
    for thread in threads:
        thread.join(15)

    per_window = Counter(windows)
    assert len(windows) == 18
    assert max(per_window.values()) <= limit
    assert len(per_window) >= 6  # 18 requests at 3 a window
    assert sorted(per_window.values(), reverse=True)[:5] == [limit] * 5  # and it was busy: no slot lost


def test_callers_in_separate_processes_share_one_limit(redis_server: RedisServer) -> None:
    key, limit = fresh_key(), 2
    script = textwrap.dedent(
        f"""
        import asyncio, json
        from agentloop.orchestration.llm.limits import RedisBackend, WindowRateLimiter

        async def main():
            limiter = WindowRateLimiter(RedisBackend({redis_server.url!r}), key={key!r},
                                        requests_per_minute={limit}, window=0.3, max_wait=10)
            permits = [await limiter.acquire() for _ in range(4)]
            print(json.dumps([[p.window, p.enforced] for p in permits]))

        asyncio.run(main())
        """
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [process.communicate(timeout=30) for process in processes]

    assert [process.returncode for process in processes] == [0, 0, 0], [err for _, err in outputs]
    permits = [permit for out, _ in outputs for permit in json.loads(out)]
    assert len(permits) == 12
    assert all(enforced for _, enforced in permits)
    assert max(Counter(window for window, _ in permits).values()) <= limit


async def test_tokens_recorded_by_one_client_close_the_window_for_every_client(
    redis_server: RedisServer,
) -> None:
    key = fresh_key()
    first, second = (
        WindowRateLimiter(
            RedisBackend(redis_server.url), key=key, tokens_per_minute=100, window=timedelta(seconds=30)
        )
        for _ in range(2)
    )

    granted = await first.try_acquire()
    await first.record(70)
    still_open = await second.try_acquire()
    await second.record(45)
    closed = await first.try_acquire()

    assert isinstance(granted, Permit) and isinstance(still_open, Permit)
    assert still_open.tokens == 70
    assert isinstance(closed, Denial)
    assert closed.reason == "tokens"
    assert 0 < closed.retry_after <= 30
    window, requests, tokens = second.usage()
    assert (requests, tokens) == (2, 115)
    assert window == closed.window


async def test_the_processor_spends_tokens_per_window_and_waits_for_the_next(
    redis_server: RedisServer,
) -> None:
    limiter = WindowRateLimiter(
        RedisBackend(redis_server.url), key=fresh_key(), tokens_per_minute=150, window=0.3, max_wait=5
    )
    model = FixedUsageModel(Usage(input_tokens=50, output_tokens=50))
    processor = RateLimitedProcessor(model, limiter)

    responses = [await REQUEST.send(processor) for _ in range(4)]

    assert not any(response.has_error for response in responses)
    windows = [permit.window for permit in model.permits if permit is not None]
    assert len(windows) == 4
    assert max(Counter(windows).values()) <= 2  # 100 tokens after two calls, 200 >= 150 after a third


async def test_a_wait_longer_than_max_wait_is_a_failure_response(
    redis_server: RedisServer, limiter_sleeps: list[float]
) -> None:
    limiter = WindowRateLimiter(
        RedisBackend(redis_server.url), key=fresh_key(), requests_per_minute=2, window=60
    )
    model = FixedUsageModel(Usage(input_tokens=1, output_tokens=1))
    processor = RateLimitedProcessor(model, limiter, max_wait=0.5)

    responses = [await REQUEST.send(processor) for _ in range(3)]

    assert [response.has_error for response in responses] == [False, False, True]
    error = responses[2].error or ""
    assert "rate limit: no request slot within max_wait 0.5s" in error
    assert "requests limit (2 requests per 60s window)" in error
    assert len(model.permits) == 2
    assert limiter_sleeps == []  # the next window is further than max_wait: it failed at once


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_when_redis_is_down_calls_proceed_unlimited_and_it_is_logged_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, limiter_sleeps: list[float]
) -> None:
    url = f"redis://:secret@127.0.0.1:{closed_port()}/0"
    backend = RedisBackend(url, timeout=0.5, retry_interval=3600)
    connects: list[str] = []
    connected = backend._connected

    def counted() -> Any:
        connects.append("connect")
        return connected()

    monkeypatch.setattr(backend, "_connected", counted)
    limiter = WindowRateLimiter(backend, key=fresh_key(), requests_per_minute=1, tokens_per_minute=10)
    model = FixedUsageModel(Usage(input_tokens=40, output_tokens=40))
    processor = RateLimitedProcessor(model, limiter)

    with caplog.at_level(logging.DEBUG, logger="agentloop.orchestration.llm"):
        responses = [await REQUEST.send(processor) for _ in range(3)]

    # never blocks for long: Redis was tried once, then left alone for retry_interval; no waiting
    assert connects == ["connect"] and limiter_sleeps == []
    assert not any(response.has_error for response in responses)  # 3 calls over a limit of 1: unlimited
    assert [permit.enforced if permit else None for permit in model.permits] == [False, False, False]
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1  # then debug lines, not a warning per call
    message = warnings[0].getMessage()
    assert "unavailable" in message and "calls proceed without the limit" in message
    assert "secret" not in caplog.text


async def test_a_redis_restart_loses_at_most_the_current_window_and_the_limiter_recovers(
    restartable_redis: RedisServer,
) -> None:
    redis_server = restartable_redis
    backend = RedisBackend(redis_server.url, timeout=0.5, retry_interval=0, log_interval=0)
    limiter = WindowRateLimiter(backend, key=fresh_key(), requests_per_minute=1, window=60)
    assert isinstance(await limiter.try_acquire(), Permit)
    assert isinstance(await limiter.try_acquire(), Denial)

    redis_server.stop()
    try:
        during = await limiter.try_acquire()
    finally:
        redis_server.start()
    after = await limiter.try_acquire()

    assert isinstance(during, Permit) and not during.enforced
    assert isinstance(after, Permit) and after.enforced  # counters were not persisted: a fresh window

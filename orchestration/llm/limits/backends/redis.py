"""The provider limit shared by every worker: fixed windows counted in Redis (see
:mod:`orchestration.llm.limits` for the processor and the in-process limiter)."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from redis import Redis
    from redis.commands.core import Script

from orchestration.llm.limits import (
    _DEFAULT_REDIS_TIMEOUT,
    DEFAULT_MAX_WAIT,
    DEFAULT_WINDOW,
    Denial,
    DenialReason,
    Permit,
    _seconds,
    _WindowLimiter,
    limit_key,
    redact_url,
)

logger = logging.getLogger(__name__)

__all__ = ["RedisRateLimiter"]


# KEYS[1]: the limit's key prefix. ARGV: window (ms), max requests, max tokens (-1: no limit).
# The window comes from the Redis server's clock, so every process agrees on it. Keys live two
# windows and are then dropped by Redis. Returns {status, window, ms left, requests, tokens}
# with status 1 granted, 2 requests spent, 3 tokens spent.
_ACQUIRE_SCRIPT = """
if redis.replicate_commands then redis.replicate_commands() end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local window_ms = tonumber(ARGV[1])
local index = math.floor(now_ms / window_ms)
local left_ms = (index + 1) * window_ms - now_ms
local prefix = KEYS[1] .. ':' .. string.format('%d', index)
local tokens = tonumber(redis.call('GET', prefix .. ':tokens') or '0')
local requests = tonumber(redis.call('GET', prefix .. ':requests') or '0')
local max_requests, max_tokens = tonumber(ARGV[2]), tonumber(ARGV[3])
if max_tokens >= 0 and tokens >= max_tokens then
  return {3, index, left_ms, requests, tokens}
end
if max_requests >= 0 and requests >= max_requests then
  return {2, index, left_ms, requests, tokens}
end
requests = redis.call('INCR', prefix .. ':requests')
redis.call('PEXPIRE', prefix .. ':requests', 2 * window_ms)
return {1, index, left_ms, requests, tokens}
"""

# KEYS[1]: the key prefix. ARGV: window (ms), tokens. Adds to the current window; returns its total.
_RECORD_SCRIPT = """
if redis.replicate_commands then redis.replicate_commands() end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local window_ms = tonumber(ARGV[1])
local index = math.floor(now_ms / window_ms)
local key = KEYS[1] .. ':' .. string.format('%d', index) .. ':tokens'
local total = redis.call('INCRBY', key, tonumber(ARGV[2]))
redis.call('PEXPIRE', key, 2 * window_ms)
return {index, total}
"""


class RedisRateLimiter(_WindowLimiter):
    """The limiter shared by every process that uses the same Redis and ``key``.

    Counters live under ``<key>:<window index>:requests`` and ``...:tokens``
    and expire after two windows. ``timeout`` bounds connecting and each
    command; a Redis error lets the call proceed (see the module doc), logged
    at warning level at most once per ``log_interval`` seconds, and for
    ``retry_interval`` seconds after it calls proceed without asking Redis (so
    an unreachable server does not add its timeout to every call).
    """

    kind = "redis"

    def __init__(
        self,
        url: str,
        *,
        key: str = limit_key("default"),
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        window: timedelta | float = DEFAULT_WINDOW,
        max_wait: timedelta | float = DEFAULT_MAX_WAIT,
        timeout: float = _DEFAULT_REDIS_TIMEOUT,
        retry_interval: float = 1.0,
        log_interval: float = 30.0,
    ) -> None:
        super().__init__(
            key=key,
            requests_per_minute=requests_per_minute,
            tokens_per_minute=tokens_per_minute,
            window=window,
            max_wait=max_wait,
        )
        if not url:
            raise ValueError("RedisRateLimiter needs a Redis URL")
        self.url = url
        self.timeout = _seconds(timeout, "timeout")
        self.retry_interval = _seconds(retry_interval, "retry_interval")
        self.log_interval = log_interval
        self._window_ms = max(1, round(self.window * 1000))
        self._client_lock = threading.Lock()
        self._client: Redis | None = None
        self._acquire: Script | None = None
        self._record: Script | None = None
        self._warned_at = -math.inf
        self._down_until = -math.inf

    def _scripts(self) -> tuple[Script, Script]:
        with self._client_lock:
            if self._acquire is None or self._record is None:
                from redis import Redis  # imported on first use: importing this module stays cheap

                self._client = Redis.from_url(
                    self.url, socket_timeout=self.timeout, socket_connect_timeout=self.timeout
                )
                self._acquire = self._client.register_script(_ACQUIRE_SCRIPT)
                self._record = self._client.register_script(_RECORD_SCRIPT)
            return self._acquire, self._record

    def _skipping(self) -> bool:
        """Whether Redis failed less than ``retry_interval`` ago (then it is not asked again yet)."""
        return time.monotonic() < self._down_until

    def _unavailable(self, action: str, error: BaseException) -> None:
        now = time.monotonic()
        self._down_until = now + self.retry_interval
        if now - self._warned_at >= self.log_interval:
            self._warned_at = now
            logger.warning(
                "rate limiter %s at %s unavailable (%s: %s); %s without the limit",
                self.key,
                redact_url(self.url),
                type(error).__name__,
                error,
                action,
            )
        else:
            logger.debug("rate limiter %s still unavailable: %s", self.key, error)

    def _acquire_sync(self) -> Sequence[Any]:
        script, _ = self._scripts()
        args = [self._window_ms, self.requests_per_minute or -1, self.tokens_per_minute or -1]
        reply: Sequence[Any] = script(keys=[self.key], args=args)
        return reply

    def _record_sync(self, tokens: int) -> None:
        _, script = self._scripts()
        script(keys=[self.key], args=[self._window_ms, tokens])

    async def try_acquire(self) -> Permit | Denial:
        if self._skipping():
            return Permit(window=-1, requests=0, tokens=0, enforced=False)
        try:
            status, index, left_ms, requests, tokens = (
                int(value) for value in await asyncio.to_thread(self._acquire_sync)
            )
        except Exception as error:  # fail open: see the module doc
            self._unavailable("calls proceed", error)
            return Permit(window=-1, requests=0, tokens=0, enforced=False)
        if status == 1:
            return Permit(window=index, requests=requests, tokens=tokens)
        reason: DenialReason = "tokens" if status == 3 else "requests"
        return Denial(window=index, reason=reason, retry_after=left_ms / 1000)

    async def record(self, tokens: int) -> None:
        if tokens <= 0 or self.tokens_per_minute is None:
            return
        if self._skipping():
            logger.debug("rate limiter %s unavailable: %d tokens go unrecorded", self.key, tokens)
            return
        try:
            await asyncio.to_thread(self._record_sync, int(tokens))
        except Exception as error:  # fail open: see the module doc
            self._unavailable(f"{tokens} tokens go unrecorded", error)

    def usage(self) -> tuple[int, int, int]:
        """``(window, requests, tokens)`` of the current window, read from Redis (raises on errors)."""
        self._scripts()
        assert self._client is not None
        seconds, micros = self._client.time()
        index = (int(seconds) * 1000 + int(micros) // 1000) // self._window_ms
        prefix = f"{self.key}:{index}"
        requests, tokens = self._client.mget([f"{prefix}:requests", f"{prefix}:tokens"])
        return index, int(requests or 0), int(tokens or 0)

    def close(self) -> None:
        """Close the connection pool (it reopens on next use)."""
        with self._client_lock:
            client, self._client, self._acquire, self._record = self._client, None, None, None
        if client is not None:
            client.close()

    def describe(self) -> str:
        return f"{self.describe_limits()}, redis {redact_url(self.url)} key {self.key}"

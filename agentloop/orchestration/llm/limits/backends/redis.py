"""Window counters in Redis, shared by every process that uses the same server and key.

Counters live under ``<key>:<window index>:requests`` and ``...:tokens`` and
expire after two windows. The window comes from the Redis server's clock, so
every process agrees on it. Taking a slot is one Lua script (both checks and
the increment), so concurrent callers never get more slots than the limit.

Failure choice: **a backend that cannot reach Redis lets the call proceed.**
A Redis error (down, timeout, a script error) is logged as a warning (at most
once per ``log_interval`` seconds per backend, the rest at debug level) and
the slot is granted unchecked, its :class:`~agentloop.orchestration.llm.limits.window.Permit`
marked ``enforced=False``. An outage of the limiter's store must not stop every
agent of a deployment; the provider's own 429s, which the OpenAI processor
retries with backoff, remain the backstop. Every Redis operation has a socket
timeout (``timeout``), so nothing blocks for long; after a failure Redis is not
asked again for ``retry_interval`` seconds (calls proceed meanwhile). Retries
the SDK makes inside one call (429, 5xx) are not counted as extra requests;
lower ``OPENAI_MAX_RETRIES`` when that matters.

redis-py is imported on first use, so importing this module stays cheap.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentloop.orchestration.errors import DenialReason
from agentloop.orchestration.interruptions import reraise_interruption
from agentloop.orchestration.llm.limits.window import Denial, Permit, duration_seconds
from agentloop.orchestration.redaction import redact_url

if TYPE_CHECKING:
    from redis import Redis
    from redis.commands.core import Script

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_TIMEOUT", "RedisBackend"]

DEFAULT_TIMEOUT = 2.0  # seconds, for connecting and for each Redis command

# KEYS[1]: the limit's key prefix. ARGV: window (ms), max requests, max tokens (-1: no limit).
# Keys live two windows and are then dropped by Redis. Returns {status, window, ms left,
# requests, tokens} with status 1 granted, 2 requests spent, 3 tokens spent.
_TAKE_SLOT_SCRIPT = """
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
_ADD_TOKENS_SCRIPT = """
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

_UNCHECKED = Permit(window=-1, requests=0, tokens=0, enforced=False)


def _window_ms(window: float) -> int:
    return max(1, round(window * 1000))


class RedisBackend:
    """Window counters on the Redis at ``url`` (connected on first use; see the module doc).

    ``timeout`` bounds connecting and each command; for ``retry_interval``
    seconds after a failure calls proceed without asking Redis (so an
    unreachable server does not add its timeout to every call); a failure is
    logged at warning level at most once per ``log_interval`` seconds.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry_interval: float = 1.0,
        log_interval: float = 30.0,
    ) -> None:
        if not url:
            raise ValueError("a Redis rate-limit backend needs a Redis URL")
        self.url = url
        self.timeout = duration_seconds(timeout, "timeout")
        self.retry_interval = duration_seconds(retry_interval, "retry_interval")
        self.log_interval = log_interval
        self._client_lock = threading.Lock()
        self._client: Redis | None = None
        self._scripts: tuple[Script, Script] | None = None
        self._warned_at = -math.inf
        self._down_until = -math.inf

    def _connected(self) -> tuple[Redis, Script, Script]:
        with self._client_lock:
            if self._client is None or self._scripts is None:
                from redis import Redis  # imported on first use: importing this module stays cheap

                self._client = Redis.from_url(
                    self.url, socket_timeout=self.timeout, socket_connect_timeout=self.timeout
                )
                self._scripts = (
                    self._client.register_script(_TAKE_SLOT_SCRIPT),
                    self._client.register_script(_ADD_TOKENS_SCRIPT),
                )
            return self._client, *self._scripts

    def _skipping(self) -> bool:
        """Whether Redis failed less than ``retry_interval`` ago (then it is not asked again yet)."""
        return time.monotonic() < self._down_until

    def _unavailable(self, key: str, action: str, error: BaseException) -> None:
        now = time.monotonic()
        self._down_until = now + self.retry_interval
        if now - self._warned_at >= self.log_interval:
            self._warned_at = now
            logger.warning(
                "rate limiter %s at %s unavailable (%s: %s); %s without the limit",
                key,
                redact_url(self.url),
                type(error).__name__,
                error,
                action,
            )
        else:
            logger.debug("rate limiter %s still unavailable: %s", key, error)

    def _take_slot_sync(self, key: str, args: list[int]) -> Sequence[Any]:
        _, take_slot, _ = self._connected()
        reply: Sequence[Any] = take_slot(keys=[key], args=args)
        return reply

    def _add_tokens_sync(self, key: str, args: list[int]) -> None:
        _, _, add_tokens = self._connected()
        add_tokens(keys=[key], args=args)

    async def take_slot(
        self, key: str, *, window: float, max_requests: int | None, max_tokens: int | None
    ) -> Permit | Denial:
        if self._skipping():
            return _UNCHECKED
        args = [_window_ms(window), max_requests or -1, max_tokens or -1]
        try:
            reply = await asyncio.to_thread(self._take_slot_sync, key, args)
            status, index, left_ms, requests, tokens = (int(value) for value in reply)
        except Exception as error:  # fail open: see the module doc
            reraise_interruption(error)
            self._unavailable(key, "calls proceed", error)
            return _UNCHECKED
        if status == 1:
            return Permit(window=index, requests=requests, tokens=tokens)
        reason: DenialReason = "tokens" if status == 3 else "requests"
        return Denial(window=index, reason=reason, retry_after=left_ms / 1000)

    async def add_tokens(self, key: str, *, window: float, tokens: int) -> None:
        if self._skipping():
            logger.debug("rate limiter %s unavailable: %d tokens go unrecorded", key, tokens)
            return
        try:
            await asyncio.to_thread(self._add_tokens_sync, key, [_window_ms(window), tokens])
        except Exception as error:  # fail open: see the module doc
            reraise_interruption(error)
            self._unavailable(key, f"{tokens} tokens go unrecorded", error)

    def usage(self, key: str, *, window: float) -> tuple[int, int, int]:
        """Read from Redis (raises on errors, unlike the other methods)."""
        client, _, _ = self._connected()
        seconds, micros = client.time()
        index = (int(seconds) * 1000 + int(micros) // 1000) // _window_ms(window)
        requests, tokens = client.mget([f"{key}:{index}:requests", f"{key}:{index}:tokens"])
        return index, int(requests or 0), int(tokens or 0)

    def describe(self, key: str) -> str:
        return f"redis {redact_url(self.url)} key {key}"

    def close(self) -> None:
        """Close the connection pool (it reopens on next use)."""
        with self._client_lock:
            client, self._client, self._scripts = self._client, None, None
        if client is not None:
            client.close()

    def __repr__(self) -> str:
        return f"<RedisBackend {redact_url(self.url)}>"

"""The step cache the workers share: results of cached steps in Redis (``actions/caching.py``).

:class:`RedisStepCache` keeps each result under ``agentloop:cache:<key>`` as JSON
text with a Redis expiry (``SET ... PX``), so a step cached by one worker is a
hit on every other worker of the deployment. :func:`step_cache_for` builds the
cache ``AGENTLOOP_CACHE_URL`` names (``orchestration/settings/``): Redis for a
``redis://`` URL (the default when the result backend or the broker is Redis),
an in-process :class:`~actions.InMemoryStepCache` for ``memory://`` (the
embedded demo: one process), none for ``none``.

Failure choice: **a Redis that cannot be reached is a miss, never a failed
step.** An error is logged (a warning at most once per ``retry_interval``), and
Redis is not asked again for ``retry_interval`` seconds: the steps meanwhile
compute their results as if nothing were cached. Every command has a socket
timeout (``timeout``) and runs in a thread, so a slow Redis never blocks the
task's event loop.

redis-py is imported on first use, so importing this module stays cheap.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from typing import TYPE_CHECKING, Any

from agentloop.actions.caching import InMemoryStepCache, StepCache
from agentloop.orchestration.interruptions import reraise_interruption
from agentloop.orchestration.redaction import redact_url
from agentloop.orchestration.settings.broker import Broker

if TYPE_CHECKING:
    from redis import Redis

logger = logging.getLogger(__name__)

__all__ = ["CACHE_KEY_PREFIX", "RedisStepCache", "step_cache_for"]

#: Where every cached step result lives in Redis.
CACHE_KEY_PREFIX = "agentloop:cache:"
DEFAULT_TIMEOUT = 2.0  # seconds, for connecting and for each Redis command


class RedisStepCache:
    """A :class:`~actions.StepCache` in Redis, shared by every process on the same server.

    ``client`` (a ``redis.Redis``) is built from ``url`` on first use unless given.
    """

    def __init__(
        self,
        url: str = "",
        *,
        prefix: str = CACHE_KEY_PREFIX,
        timeout: float = DEFAULT_TIMEOUT,
        retry_interval: float = 5.0,
        client: Redis | None = None,
    ) -> None:
        if client is None and not url:
            raise ValueError("RedisStepCache needs a redis:// URL or a client")
        self.url, self.prefix, self.timeout, self.retry_interval = url, prefix, timeout, retry_interval
        self._client = client
        self._lock = threading.Lock()
        self._down_until = -math.inf

    @property
    def client(self) -> Redis:
        with self._lock:
            if self._client is None:
                from redis import Redis

                self._client = Redis.from_url(
                    self.url, socket_timeout=self.timeout, socket_connect_timeout=self.timeout
                )
            return self._client

    def _available(self) -> bool:
        with self._lock:
            return time.monotonic() >= self._down_until

    def _failed(self, what: str, error: Exception) -> None:
        with self._lock:
            warn = time.monotonic() >= self._down_until
            self._down_until = time.monotonic() + self.retry_interval
        level = logging.WARNING if warn else logging.DEBUG
        logger.log(
            level,
            "step cache at %s failed to %s (%s: %s): steps run uncached for %gs",
            redact_url(self.url) or "redis",
            what,
            type(error).__name__,
            error,
            self.retry_interval,
        )

    def get_now(self, key: str) -> str | None:
        """The text under ``key``, or ``None`` (missing, expired, or Redis away)."""
        if not self._available():
            return None
        try:
            raw: Any = self.client.get(self.prefix + key)
        except Exception as error:  # redis-py's errors, and a bad URL: a miss
            reraise_interruption(error)
            self._failed("read", error)
            return None
        return raw.decode() if isinstance(raw, bytes) else raw

    def set_now(self, key: str, value: str, *, ttl: float) -> None:
        """Keep ``value`` under ``key`` for ``ttl`` seconds (nothing, when Redis is away)."""
        if not self._available():
            return
        try:
            self.client.set(self.prefix + key, value, px=max(1, round(ttl * 1000)))
        except Exception as error:
            reraise_interruption(error)
            self._failed("write", error)

    async def get(self, key: str) -> str | None:
        return await asyncio.to_thread(self.get_now, key)

    async def set(self, key: str, value: str, *, ttl: float) -> None:
        await asyncio.to_thread(self.set_now, key, value, ttl=ttl)

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __repr__(self) -> str:
        return f"RedisStepCache({redact_url(self.url)!r}, prefix={self.prefix!r})"


def step_cache_for(url: str) -> StepCache | None:
    """The step cache ``url`` names: ``redis://`` / ``rediss://`` (Redis), ``memory://`` (this
    process), ``none`` (no caching)."""
    transport = Broker.of(url)  # the cache's URL names its transport as a broker's does
    if transport.is_redis:
        return RedisStepCache(url)
    if transport.in_process:
        return InMemoryStepCache()
    if url.strip().lower() in ("none", ""):
        return None
    raise ValueError(f"no step cache for {redact_url(url)!r}: use redis://, memory:// or none")

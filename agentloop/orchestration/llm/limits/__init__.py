"""Provider rate limits: one fixed-window algorithm over a memory or a Redis backend.

- :mod:`~agentloop.orchestration.llm.limits.window`: :class:`WindowRateLimiter` (the
  algorithm), :class:`Permit`; it raises
  :class:`~agentloop.orchestration.errors.RateLimitTimeoutError` when a slot is too far off.
- :mod:`~agentloop.orchestration.llm.limits.backends`: :class:`MemoryBackend` (this
  process) and :class:`RedisBackend` (every worker on one Redis).
- :mod:`~agentloop.orchestration.llm.limits.processor`: :class:`RateLimitedProcessor`,
  which asks a limiter for a slot before each model call.
"""

from agentloop.orchestration.llm.limits.backends.memory import MemoryBackend
from agentloop.orchestration.llm.limits.backends.redis import RedisBackend
from agentloop.orchestration.llm.limits.processor import RateLimitedProcessor, RateLimiter, current_permit
from agentloop.orchestration.llm.limits.window import (
    Denial,
    Permit,
    WindowBackend,
    WindowRateLimiter,
    limit_key,
)

__all__ = [
    "Denial",
    "MemoryBackend",
    "Permit",
    "RateLimitedProcessor",
    "RateLimiter",
    "RedisBackend",
    "WindowBackend",
    "WindowRateLimiter",
    "current_permit",
    "limit_key",
]

"""Model processors: the OpenAI and Anthropic processors, the offline model, and provider rate limits.

- :class:`ModelProvider` builds the processor a deployment runs with from its
  :class:`~orchestration.settings.ModelSettings` (OpenAI, Anthropic or a
  compatible server when configured, else the offline model; rate-limited when asked),
  and owns the limiter its processors share. :func:`processor_from_env` is
  the short way; :func:`describe_processor` says what a processor is.
- :class:`OpenAIProcessor` (Chat Completions on the ``openai`` SDK),
  :class:`AnthropicProcessor` (the Messages API on the ``anthropic`` SDK, an
  optional extra) and :class:`OfflineModel` (deterministic, no key) implement the processor
  protocol on :class:`BaseProcessor`, which hands them one
  :class:`~actions.model.ModelRequest` per turn.
- Rate limits (:mod:`orchestration.llm.limits`): :class:`WindowRateLimiter`,
  one fixed-window algorithm over a :class:`MemoryBackend` or a
  :class:`RedisBackend`, and :class:`RateLimitedProcessor`, which asks it for
  a slot before each call.

Names are imported on first use, so importing this package stays cheap (the
SDKs and ``redis`` load only when a processor or limiter needs them).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestration.llm.anthropic_processor import AnthropicProcessor
    from orchestration.llm.base import BaseProcessor
    from orchestration.llm.limits.backends.memory import MemoryBackend
    from orchestration.llm.limits.backends.redis import RedisBackend
    from orchestration.llm.limits.processor import RateLimitedProcessor, RateLimiter, current_permit
    from orchestration.llm.limits.window import Permit, RateLimitTimeoutError, WindowRateLimiter, limit_key
    from orchestration.llm.offline import OfflineModel
    from orchestration.llm.openai_processor import OpenAIProcessor
    from orchestration.llm.provider import ModelProvider, describe_processor, processor_from_env

__all__ = [
    "AnthropicProcessor",
    "BaseProcessor",
    "MemoryBackend",
    "ModelProvider",
    "OfflineModel",
    "OpenAIProcessor",
    "Permit",
    "RateLimitTimeoutError",
    "RateLimitedProcessor",
    "RateLimiter",
    "RedisBackend",
    "WindowRateLimiter",
    "current_permit",
    "describe_processor",
    "limit_key",
    "processor_from_env",
]

_HOMES = {
    "AnthropicProcessor": "orchestration.llm.anthropic_processor",
    "BaseProcessor": "orchestration.llm.base",
    "MemoryBackend": "orchestration.llm.limits.backends.memory",
    "ModelProvider": "orchestration.llm.provider",
    "OfflineModel": "orchestration.llm.offline",
    "OpenAIProcessor": "orchestration.llm.openai_processor",
    "Permit": "orchestration.llm.limits.window",
    "RateLimitTimeoutError": "orchestration.llm.limits.window",
    "RateLimitedProcessor": "orchestration.llm.limits.processor",
    "RateLimiter": "orchestration.llm.limits.processor",
    "RedisBackend": "orchestration.llm.limits.backends.redis",
    "WindowRateLimiter": "orchestration.llm.limits.window",
    "current_permit": "orchestration.llm.limits.processor",
    "describe_processor": "orchestration.llm.provider",
    "limit_key": "orchestration.llm.limits.window",
    "processor_from_env": "orchestration.llm.provider",
}


def __getattr__(name: str) -> Any:
    module = _HOMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

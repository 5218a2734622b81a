"""Model processors: the OpenAI and Anthropic processors, the offline model, and provider rate limits.

- :class:`ModelProvider` builds the processor a deployment runs with from its
  :class:`~agentloop.orchestration.settings.ModelSettings` (OpenAI, Anthropic or a
  compatible server when configured, else the offline model; rate-limited when asked),
  and owns the limiter its processors share. :func:`processor_from_env` is
  the short way; :func:`describe_processor` says what a processor is.
- :class:`OpenAIProcessor` (Chat Completions on the ``openai`` SDK),
  :class:`AnthropicProcessor` (the Messages API on the ``anthropic`` SDK, an
  optional extra) and :class:`OfflineModel` (deterministic, no key) implement the processor
  protocol on :class:`BaseProcessor`, which hands them one
  :class:`~agentloop.actions.model.ModelRequest` per turn. Each provider is a subpackage
  (``openai/``, ``anthropic/``: processor, mapping, stream, errors) over one base,
  :class:`~agentloop.orchestration.llm.sdk_processor.SdkProcessor`, which holds what both do alike.
- Rate limits (:mod:`agentloop.orchestration.llm.limits`): :class:`WindowRateLimiter`,
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
    from agentloop.orchestration.llm.anthropic.processor import AnthropicProcessor
    from agentloop.orchestration.llm.base import BaseProcessor
    from agentloop.orchestration.llm.limits.backends.memory import MemoryBackend
    from agentloop.orchestration.llm.limits.backends.redis import RedisBackend
    from agentloop.orchestration.llm.limits.processor import RateLimitedProcessor, RateLimiter, current_permit
    from agentloop.orchestration.llm.limits.window import (
        Permit,
        RateLimitTimeoutError,
        WindowRateLimiter,
        limit_key,
    )
    from agentloop.orchestration.llm.offline import OfflineModel
    from agentloop.orchestration.llm.openai.processor import OpenAIProcessor
    from agentloop.orchestration.llm.provider import ModelProvider, describe_processor, processor_from_env

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
    "AnthropicProcessor": "agentloop.orchestration.llm.anthropic.processor",
    "BaseProcessor": "agentloop.orchestration.llm.base",
    "MemoryBackend": "agentloop.orchestration.llm.limits.backends.memory",
    "ModelProvider": "agentloop.orchestration.llm.provider",
    "OfflineModel": "agentloop.orchestration.llm.offline",
    "OpenAIProcessor": "agentloop.orchestration.llm.openai.processor",
    "Permit": "agentloop.orchestration.llm.limits.window",
    "RateLimitTimeoutError": "agentloop.orchestration.llm.limits.window",
    "RateLimitedProcessor": "agentloop.orchestration.llm.limits.processor",
    "RateLimiter": "agentloop.orchestration.llm.limits.processor",
    "RedisBackend": "agentloop.orchestration.llm.limits.backends.redis",
    "WindowRateLimiter": "agentloop.orchestration.llm.limits.window",
    "current_permit": "agentloop.orchestration.llm.limits.processor",
    "describe_processor": "agentloop.orchestration.llm.provider",
    "limit_key": "agentloop.orchestration.llm.limits.window",
    "processor_from_env": "agentloop.orchestration.llm.provider",
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

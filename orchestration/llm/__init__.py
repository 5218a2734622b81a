"""Model processors: the OpenAI processor, the offline model, and shared provider limits.

:func:`processor_from_env` picks the processor a deployment runs with, from the
environment (the same variables on every worker):

- ``OPENAI_API_KEY`` and/or ``OPENAI_BASE_URL`` set: an :class:`OpenAIProcessor`
  (:meth:`OpenAIProcessor.from_env` reads ``OPENAI_MODEL``,
  ``OPENAI_TIMEOUT_SECONDS`` and ``OPENAI_MAX_RETRIES`` too); otherwise the
  :class:`OfflineModel` (deterministic, no key, no network).
- ``AGENTLOOP_MODEL_RPM`` and/or ``AGENTLOOP_MODEL_TPM`` set (requests / tokens
  per minute): the processor is wrapped in a :class:`RateLimitedProcessor`. The
  limiter is a :class:`RedisRateLimiter` shared by every worker when
  ``REDIS_URL`` is set, else a :class:`LocalRateLimiter` for this process.
  Optional: ``AGENTLOOP_MODEL_LIMIT_NAME`` (the limit's name, so its Redis key
  is ``agentloop:ratelimit:<name>``; default the model name),
  ``AGENTLOOP_MODEL_LIMIT_WINDOW_SECONDS`` (default 60: the limits count per
  window) and ``AGENTLOOP_MODEL_LIMIT_MAX_WAIT_SECONDS`` (default 120: the
  longest a call waits for a slot before it fails).

Limiters are shared within a process: every processor built from the same
settings uses one limiter (and one Redis connection pool).

:func:`describe_processor` says in one line what a processor is, for display
(never a key or a password).

The submodules import the ``openai`` SDK and ``redis`` only when used, so
importing this package stays cheap.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestration.llm.limits import (
        LocalRateLimiter,
        Permit,
        RateLimitedProcessor,
        RateLimiter,
        RateLimitTimeoutError,
        current_permit,
        limit_key,
    )
    from orchestration.llm.offline import OfflineModel
    from orchestration.llm.openai_processor import OpenAIProcessor
    from orchestration.llm.redis_limits import RedisRateLimiter

__all__ = [
    "LocalRateLimiter",
    "OfflineModel",
    "OpenAIProcessor",
    "Permit",
    "RateLimitTimeoutError",
    "RateLimitedProcessor",
    "RateLimiter",
    "RedisRateLimiter",
    "current_permit",
    "describe_processor",
    "limit_key",
    "processor_from_env",
]

_LAZY = {
    "LocalRateLimiter": "orchestration.llm.limits",
    "Permit": "orchestration.llm.limits",
    "RateLimitTimeoutError": "orchestration.llm.limits",
    "RateLimitedProcessor": "orchestration.llm.limits",
    "RateLimiter": "orchestration.llm.limits",
    "RedisRateLimiter": "orchestration.llm.redis_limits",
    "current_permit": "orchestration.llm.limits",
    "limit_key": "orchestration.llm.limits",
    "OfflineModel": "orchestration.llm.offline",
    "OpenAIProcessor": "orchestration.llm.openai_processor",
}

OFFLINE_DESCRIPTION = "offline (deterministic, no API key)"

_limiters: dict[tuple[Any, ...], Any] = {}
_limiters_lock = threading.Lock()


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _text(env: Mapping[str, str], name: str) -> str | None:
    text = env.get(name, "").strip()
    return text or None


def _positive_int(env: Mapping[str, str], name: str) -> int | None:
    text = _text(env, name)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, not {text!r}")
    return value


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    text = _text(env, name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{name} must be a positive number of seconds, not {text!r}")
    return value


def _shared_limiter(
    *,
    redis_url: str | None,
    key: str,
    rpm: int | None,
    tpm: int | None,
    window: float,
    max_wait: float,
) -> RateLimiter:
    """One limiter per distinct setting in this process (a local limiter must be shared to limit)."""
    from orchestration.llm.limits import LocalRateLimiter
    from orchestration.llm.redis_limits import RedisRateLimiter

    cache_key = (redis_url, key, rpm, tpm, window, max_wait)
    with _limiters_lock:
        limiter = _limiters.get(cache_key)
        if limiter is None:
            options: dict[str, Any] = {
                "key": key,
                "requests_per_minute": rpm,
                "tokens_per_minute": tpm,
                "window": timedelta(seconds=window),
                "max_wait": timedelta(seconds=max_wait),
            }
            limiter = RedisRateLimiter(redis_url, **options) if redis_url else LocalRateLimiter(**options)
            _limiters[cache_key] = limiter
        result: RateLimiter = limiter
        return result


def processor_from_env(
    environ: Mapping[str, str] | None = None, *, offline: Callable[[], Any] | None = None
) -> Any:
    """The model processor the environment asks for (see the module doc).

    ``environ`` defaults to ``os.environ``; empty values count as unset.
    ``offline`` builds the model used without a key (default: a plain
    ``OfflineModel``; an application passes one with its responders).
    Raises ``ValueError`` for a malformed setting.
    """
    env = os.environ if environ is None else environ
    processor: Any
    if _text(env, "OPENAI_API_KEY") or _text(env, "OPENAI_BASE_URL"):
        from orchestration.llm.openai_processor import OpenAIProcessor

        processor = OpenAIProcessor.from_env(env)
        model = processor.model
    else:
        from orchestration.llm.offline import OfflineModel

        processor = offline() if offline is not None else OfflineModel()
        model = OfflineModel.model_name
    rpm = _positive_int(env, "AGENTLOOP_MODEL_RPM")
    tpm = _positive_int(env, "AGENTLOOP_MODEL_TPM")
    if rpm is None and tpm is None:
        return processor
    from orchestration.llm.limits import DEFAULT_MAX_WAIT, DEFAULT_WINDOW, RateLimitedProcessor, limit_key

    limiter = _shared_limiter(
        redis_url=_text(env, "REDIS_URL"),
        key=limit_key(_text(env, "AGENTLOOP_MODEL_LIMIT_NAME") or model),
        rpm=rpm,
        tpm=tpm,
        window=_seconds(env, "AGENTLOOP_MODEL_LIMIT_WINDOW_SECONDS", DEFAULT_WINDOW.total_seconds()),
        max_wait=_seconds(env, "AGENTLOOP_MODEL_LIMIT_MAX_WAIT_SECONDS", DEFAULT_MAX_WAIT.total_seconds()),
    )
    return RateLimitedProcessor(processor, limiter)


def _loaded(module: str, name: str) -> type[Any] | None:
    """The class ``module.name`` when its module is imported (else nothing can be an instance)."""
    loaded = sys.modules.get(module)
    cls = getattr(loaded, name, None) if loaded is not None else None
    return cls if isinstance(cls, type) else None


def describe_processor(processor: Any) -> str:
    """One line saying what ``processor`` is: model, server (no credentials), limits."""
    from orchestration.llm.limits import RateLimitedProcessor, redact_url

    if isinstance(processor, RateLimitedProcessor):
        return f"{describe_processor(processor.inner)}; rate-limited: {processor.limiter.describe()}"
    offline = _loaded("orchestration.llm.offline", "OfflineModel")
    if offline is not None and isinstance(processor, offline):
        return OFFLINE_DESCRIPTION
    openai = _loaded("orchestration.llm.openai_processor", "OpenAIProcessor")
    if openai is not None and isinstance(processor, openai):
        return f"OpenAI-compatible model {processor.model} at {redact_url(processor.base_url)}"
    kind = type(processor).__name__
    model = getattr(processor, "model", None) or getattr(processor, "model_name", None)
    return f"{kind} ({model})" if isinstance(model, str) and model else kind

"""``ModelProvider``: the model processors a deployment runs with, built from its settings.

What :meth:`ModelProvider.processor` returns, from
:class:`~agentloop.orchestration.settings.ModelSettings` (the same variables on every worker),
the first that applies (:attr:`ModelProvider.kind`):

- ``AGENTLOOP_MODEL_PROVIDER`` set (``openai``, ``anthropic`` or ``offline``): that one.
- ``OPENAI_API_KEY`` and/or ``OPENAI_BASE_URL`` set: an
  :class:`~agentloop.orchestration.llm.openai.processor.OpenAIProcessor` (with
  ``OPENAI_TIMEOUT_SECONDS``, ``OPENAI_MAX_RETRIES``).
- ``ANTHROPIC_API_KEY`` and/or ``ANTHROPIC_BASE_URL`` set: an
  :class:`~agentloop.orchestration.llm.anthropic.processor.AnthropicProcessor` (the
  ``anthropic`` extra; with ``ANTHROPIC_TIMEOUT_SECONDS``, ``ANTHROPIC_MAX_RETRIES``,
  ``ANTHROPIC_MAX_TOKENS``).
- otherwise the :class:`~agentloop.orchestration.llm.offline.OfflineModel`
  (deterministic, no key, no network), or the one ``offline`` builds.

``AGENTLOOP_MODEL`` names the model of either provider (default: ``OPENAI_MODEL``
for OpenAI, ``claude-haiku-4-5`` for Anthropic); ``AGENTLOOP_MODEL_STREAM`` makes it
stream its replies, reporting partial output as ``delta`` events.
- ``AGENTLOOP_MODEL_RPM`` and/or ``AGENTLOOP_MODEL_TPM`` set (requests / tokens
  per window): the processor is wrapped in a
  :class:`~agentloop.orchestration.llm.limits.processor.RateLimitedProcessor`. The
  limiter counts in Redis, shared by every worker, when ``REDIS_URL`` is set,
  else in this process. ``AGENTLOOP_MODEL_LIMIT_NAME`` names the limit (its
  Redis key is ``agentloop:ratelimit:<name>``; default the model name),
  ``AGENTLOOP_MODEL_LIMIT_WINDOW_SECONDS`` is the window the limits count in
  (default 60) and ``AGENTLOOP_MODEL_LIMIT_MAX_WAIT_SECONDS`` the longest a
  call waits for a slot before it fails (default 120).

Build one provider per process (or per app) and ask it for processors: they
all share its limiter, and so its Redis connection pool. Its OpenAI or Anthropic
processors also share one SDK client (and its HTTP connection pool) per event
loop (:mod:`~agentloop.orchestration.llm.loop_clients`): a thread-pool worker runs one loop
per thread, so a task costs no client or connection set-up, and a processor built
once serves any number of ``asyncio.run`` calls and threads. Closing such a
processor leaves the shared clients open; each lives as long as its loop.

:func:`processor_from_env` is the short way for a script: settings loaded from
the environment, one provider, one processor. :func:`describe_processor` says
in one line what a processor is, for display (never a key or a password).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from agentloop.actions.model import ModelProcessor
from agentloop.orchestration.llm.limits.backends.memory import MemoryBackend
from agentloop.orchestration.llm.limits.backends.redis import RedisBackend
from agentloop.orchestration.llm.limits.keyed import KeyedRateLimiter
from agentloop.orchestration.llm.limits.processor import RateLimitedProcessor
from agentloop.orchestration.llm.limits.window import WindowBackend, WindowRateLimiter, limit_key
from agentloop.orchestration.llm.offline import OfflineModel
from agentloop.orchestration.providers.table import OFFLINE, load, setting
from agentloop.orchestration.providers.table import PROVIDERS as PROVIDER_TABLE
from agentloop.orchestration.redaction import redact_url
from agentloop.orchestration.settings import ModelSettings, load_settings
from agentloop.orchestration.settings.provider import ProviderName

__all__ = ["OFFLINE_DESCRIPTION", "ModelProvider", "describe_processor", "processor_from_env"]

OFFLINE_DESCRIPTION = "offline (deterministic, no API key)"


class ModelProvider:
    """Builds processors from ``settings`` (see the module doc); owns the limiter they share.

    ``offline`` builds the model used without a key (default: a plain
    :class:`OfflineModel`; an application passes one with its responders).
    """

    def __init__(
        self, settings: ModelSettings, *, offline: Callable[[], ModelProcessor] | None = None
    ) -> None:
        self.settings = settings
        self._offline = offline
        self._lock = threading.Lock()
        self._limiter: WindowRateLimiter | None = None
        self._keyed: KeyedRateLimiter | None = None
        # the processor whose SDK clients (one per event loop) every processor built here shares
        self._sdk_processor: Any = None

    @property
    def kind(self) -> ProviderName:
        """The processors this provider builds: a name of the provider table or ``offline`` (module doc)."""
        chosen = self.settings.provider.name
        if chosen is not None:
            return chosen
        for row in PROVIDER_TABLE.values():
            if (
                setting(self.settings, row.api_key) is not None
                or setting(self.settings, row.base_url) is not None
            ):
                return row.name
        return OFFLINE

    @property
    def model_name(self) -> str:
        """The model the processors ask (``offline`` for the offline model)."""
        row = PROVIDER_TABLE.get(self.kind)
        if row is None:
            return OfflineModel.model_name
        if self.settings.provider.model_name:
            return self.settings.provider.model_name
        return str(setting(self.settings, row.model_setting)) if row.model_setting else row.default_model

    @property
    def limiter(self) -> WindowRateLimiter | None:
        """The limiter all this provider's processors share (built on first use); ``None`` without limits."""
        settings = self.settings
        if settings.rpm is None and settings.tpm is None:
            return None
        with self._lock:
            if self._limiter is None:
                backend: WindowBackend = (
                    RedisBackend(settings.redis_url) if settings.redis_url else MemoryBackend()
                )
                self._limiter = WindowRateLimiter(
                    backend,
                    key=limit_key(settings.limit_name or self.model_name),
                    requests_per_minute=settings.rpm,
                    tokens_per_minute=settings.tpm,
                    window=settings.limit_window_seconds,
                    max_wait=settings.limit_max_wait_seconds,
                )
            return self._limiter

    def processor(self) -> ModelProcessor:
        """A new processor, rate-limited by the shared limiter when limits are set.

        Raises ``ValueError`` for settings the processor cannot use, and
        ``ModuleNotFoundError`` (with the extra to install) when Anthropic is asked
        for without the ``anthropic`` SDK.
        """
        model = self._model()
        limiter = self.limiter
        shared = model if limiter is None else RateLimitedProcessor(model, limiter)
        keyed = self.keyed_limiter
        return shared if keyed is None else RateLimitedProcessor(shared, keyed)

    @property
    def keyed_limiter(self) -> KeyedRateLimiter | None:
        """Each concurrency key's limits (``llm/limits/keyed.py``), asked before the shared limit;
        ``None`` without per-key limits."""
        settings = self.settings
        if settings.key_rpm is None and settings.key_tpm is None and settings.key_token_budget is None:
            return None
        with self._lock:
            if self._keyed is None:
                shared = self._limiter.backend if self._limiter is not None else None
                backend: WindowBackend = shared or (
                    RedisBackend(settings.redis_url) if settings.redis_url else MemoryBackend()
                )
                self._keyed = KeyedRateLimiter(
                    backend,
                    name=settings.limit_name or self.model_name,
                    requests_per_minute=settings.key_rpm,
                    tokens_per_minute=settings.key_tpm,
                    window=settings.limit_window_seconds,
                    max_wait=settings.limit_max_wait_seconds,
                    token_budget=settings.key_token_budget,
                    budget_period=settings.key_budget_seconds,
                )
            return self._keyed

    def _model(self) -> ModelProcessor:
        kind = self.kind
        if kind == OFFLINE:
            return self._offline() if self._offline is not None else OfflineModel()
        with self._lock:
            base = self._sdk_processor
            if base is None:
                base = self._sdk_processor = self._sdk(kind)
        shared: ModelProcessor = base.sharing_clients()
        return shared

    def preload(self) -> None:
        """Import the module of the SDK processor this provider builds (nothing offline, nor when
        its SDK is not installed): what the first processor would import. A prefork worker does
        so before its pool forks, so no pool process pays for it at its first model call."""
        row = PROVIDER_TABLE.get(self.kind)
        if row is not None:
            try:
                load(row.processor)
            except ImportError:  # the processor's first use says which extra to install
                return

    def _sdk(self, kind: ProviderName) -> Any:
        """The processor whose per-loop SDK clients this provider's processors share (module doc)."""
        # imported here: an SDK is loaded only by deployments that call it
        return load(PROVIDER_TABLE[kind].processor).from_settings(self.settings)

    def close(self) -> None:
        """Close the limiter's connections (a later processor opens them again)."""
        with self._lock:
            limiter, self._limiter = self._limiter, None
        if limiter is not None:
            limiter.close()

    def __repr__(self) -> str:
        return f"<ModelProvider {self.model_name}, limiter {self.limiter!r}>"


def processor_from_env(
    environ: Mapping[str, str] | None = None, *, offline: Callable[[], ModelProcessor] | None = None
) -> ModelProcessor:
    """The processor the environment asks for: ``ModelProvider(load_settings(environ).model).processor()``.

    ``environ`` defaults to ``os.environ``; empty values count as unset. The
    processor's limiter is its own: processors that must share an in-process
    limit come from one :class:`ModelProvider`. Raises ``ValueError`` for a
    malformed setting.
    """
    return ModelProvider(load_settings(environ).model, offline=offline).processor()


def _loaded_class(module: str, name: str) -> type[Any] | None:
    """The class ``module.name`` when its module is imported (else nothing can be an instance)."""
    loaded = sys.modules.get(module)
    cls = getattr(loaded, name, None) if loaded is not None else None
    return cls if isinstance(cls, type) else None


def describe_processor(processor: object) -> str:
    """One line saying what ``processor`` is: model, server (no credentials), limits."""
    if isinstance(processor, RateLimitedProcessor):
        return f"{describe_processor(processor.inner)}; rate-limited: {processor.limiter.describe()}"
    if isinstance(processor, OfflineModel):
        return OFFLINE_DESCRIPTION
    streamed = "; streamed" if getattr(processor, "stream", False) is True else ""
    for row in PROVIDER_TABLE.values():
        cls = _loaded_class(row.processor_module, row.processor_class)
        if cls is not None and isinstance(processor, cls):
            return f"{row.label} {processor.model} at {redact_url(processor.base_url)}{streamed}"
    kind = type(processor).__name__
    model = getattr(processor, "model", None) or getattr(processor, "model_name", None)
    return f"{kind} ({model})" if isinstance(model, str) and model else kind

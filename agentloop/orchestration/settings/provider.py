"""Which model provider a deployment uses, the second provider's connection, and the test switch.

A group of :mod:`agentloop.orchestration.settings` (``settings.model.provider``), read by
:func:`~agentloop.orchestration.settings.load_settings` like every other group.

Which processor :class:`~agentloop.orchestration.llm.provider.ModelProvider` builds:

1. ``AGENTLOOP_MODEL_PROVIDER`` (``openai``, ``anthropic`` or ``offline``) when set;
2. else OpenAI when ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` is set (first, as before
   there was a second provider);
3. else Anthropic when ``ANTHROPIC_API_KEY`` or ``ANTHROPIC_BASE_URL`` is set;
4. else the offline model.

``AGENTLOOP_MODEL`` names the model for whichever provider runs; without it,
OpenAI asks ``OPENAI_MODEL`` and Anthropic :data:`DEFAULT_ANTHROPIC_MODEL`.
``AGENTLOOP_MODEL_STREAM`` makes either provider's processor stream its replies, reporting
partial output as throttled ``delta`` events (every ``AGENTLOOP_MODEL_STREAM_INTERVAL_SECONDS``
at most).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import SecretStr, ValidationInfo, field_validator

from agentloop.orchestration.providers.table import OFFLINE
from agentloop.orchestration.providers.table import PROVIDERS as PROVIDER_TABLE
from agentloop.orchestration.settings.group import SettingsGroup, count, env_field, seconds, switch

__all__ = ["DEFAULT_ANTHROPIC_MODEL", "PROVIDERS", "ProviderName", "ProviderSettings"]

#: A name of the provider table (:mod:`agentloop.orchestration.providers.table`) or ``offline``.
ProviderName = str
#: The values ``AGENTLOOP_MODEL_PROVIDER`` accepts: the table's names, then ``offline``.
PROVIDERS: tuple[ProviderName, ...] = (*PROVIDER_TABLE, OFFLINE)
#: The model asked on Anthropic when ``AGENTLOOP_MODEL`` is not set.
DEFAULT_ANTHROPIC_MODEL = PROVIDER_TABLE["anthropic"].default_model


class ProviderSettings(SettingsGroup):
    """The provider choice, the model name, the Anthropic connection, and whether tests may reach a model."""

    _URL_FIELDS: ClassVar[frozenset[str]] = frozenset({"anthropic_base_url"})

    name: ProviderName | None = env_field("AGENTLOOP_MODEL_PROVIDER")
    """``AGENTLOOP_MODEL_PROVIDER``: ``openai``, ``anthropic`` or ``offline``. Default: from the keys set
    (OpenAI's first, then Anthropic's, else offline)."""
    model_name: str | None = env_field("AGENTLOOP_MODEL")
    """``AGENTLOOP_MODEL``: the model of whichever provider runs (wins over ``OPENAI_MODEL``)."""
    anthropic_api_key: SecretStr | None = env_field("ANTHROPIC_API_KEY")
    """``ANTHROPIC_API_KEY``: with it or a base URL (and no OpenAI setting) the Anthropic processor runs."""
    anthropic_base_url: str | None = env_field("ANTHROPIC_BASE_URL")
    """``ANTHROPIC_BASE_URL``: a server speaking Anthropic's Messages API (a local one needs no key).
    Default: Anthropic's."""
    anthropic_timeout_seconds: float = env_field("ANTHROPIC_TIMEOUT_SECONDS", 60.0)
    """``ANTHROPIC_TIMEOUT_SECONDS``: the timeout of each attempt. Default: ``60``."""
    anthropic_max_retries: int = env_field("ANTHROPIC_MAX_RETRIES", 3)
    """``ANTHROPIC_MAX_RETRIES``: retries of a 408/409/429/5xx or connection failure. Default: ``3``."""
    anthropic_max_tokens: int = env_field("ANTHROPIC_MAX_TOKENS", 4096)
    """``ANTHROPIC_MAX_TOKENS``: the most tokens one reply may hold (the API needs it). Default: ``4096``."""
    stream: bool = env_field("AGENTLOOP_MODEL_STREAM", False)
    """``AGENTLOOP_MODEL_STREAM``: ``1`` streams each reply and reports its partial text and tool
    arguments as ``delta`` progress events (the result is the same). Default: off."""
    stream_interval_seconds: float = env_field("AGENTLOOP_MODEL_STREAM_INTERVAL_SECONDS", 0.1)
    """``AGENTLOOP_MODEL_STREAM_INTERVAL_SECONDS``: the least time between two ``delta`` events of one
    reply (deltas in between are joined). Default: ``0.1``."""
    allow_model_requests: bool | None = env_field("AGENTLOOP_ALLOW_MODEL_REQUESTS")
    """``AGENTLOOP_ALLOW_MODEL_REQUESTS``: ``1`` lets tests under the agentloop pytest plugin reach a
    model server off this machine (blocked by default there). Outside tests nothing is blocked."""

    @field_validator("name", mode="before")
    @classmethod
    def _provider(cls, value: Any) -> Any:
        text = value.strip().lower() if isinstance(value, str) else value
        if text not in PROVIDERS:
            raise ValueError(f"AGENTLOOP_MODEL_PROVIDER must be one of {', '.join(PROVIDERS)}, not {value!r}")
        return text

    @field_validator("anthropic_timeout_seconds", mode="before")
    @classmethod
    def _timeout(cls, value: Any) -> float:
        return seconds(value, "ANTHROPIC_TIMEOUT_SECONDS", positive=True)

    @field_validator("stream_interval_seconds", mode="before")
    @classmethod
    def _interval(cls, value: Any) -> float:
        return seconds(value, "AGENTLOOP_MODEL_STREAM_INTERVAL_SECONDS")

    @field_validator("anthropic_max_retries", "anthropic_max_tokens", mode="before")
    @classmethod
    def _count(cls, value: Any, info: ValidationInfo) -> int:
        return count(
            value, cls.env_name(info.field_name), least=0 if info.field_name == "anthropic_max_retries" else 1
        )

    @field_validator("allow_model_requests", "stream", mode="before")
    @classmethod
    def _switch(cls, value: Any, info: ValidationInfo) -> bool:
        return switch(value, cls.env_name(info.field_name))

"""How the model processor is built: the OpenAI-compatible server, the shared rate limits, and
the provider's own group (:mod:`agentloop.orchestration.settings.provider`)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, SecretStr, ValidationInfo, field_validator

from agentloop.orchestration.providers.table import PROVIDERS as PROVIDER_TABLE
from agentloop.orchestration.providers.table import setting
from agentloop.orchestration.settings.group import SettingsGroup, count, env_field, seconds
from agentloop.orchestration.settings.provider import ProviderSettings

__all__ = ["ModelSettings"]


class ModelSettings(SettingsGroup):
    """How the model processor is built: the OpenAI-compatible server and the shared rate limits."""

    _URL_FIELDS: ClassVar[frozenset[str]] = frozenset({"openai_base_url", "redis_url"})

    openai_api_key: SecretStr | None = env_field("OPENAI_API_KEY")
    """``OPENAI_API_KEY``: with it or a base URL the OpenAI processor runs, else the offline model."""
    openai_base_url: str | None = env_field("OPENAI_BASE_URL")
    """``OPENAI_BASE_URL``: an OpenAI-compatible server (a local one needs no key). Default: OpenAI's."""
    openai_model: str = env_field("OPENAI_MODEL", "gpt-4o-mini")
    """``OPENAI_MODEL``: the model name sent with every request. Default: ``gpt-4o-mini``."""
    openai_timeout_seconds: float = env_field("OPENAI_TIMEOUT_SECONDS", 60.0)
    """``OPENAI_TIMEOUT_SECONDS``: the timeout of each attempt. Default: ``60``."""
    openai_max_retries: int = env_field("OPENAI_MAX_RETRIES", 3)
    """``OPENAI_MAX_RETRIES``: retries of a 408/409/429/5xx or connection failure. Default: ``3``."""
    rpm: int | None = env_field("AGENTLOOP_MODEL_RPM")
    """``AGENTLOOP_MODEL_RPM``: requests per minute (per window) allowed. Default: no limit."""
    tpm: int | None = env_field("AGENTLOOP_MODEL_TPM")
    """``AGENTLOOP_MODEL_TPM``: tokens per minute (per window) allowed. Default: no limit."""
    limit_name: str | None = env_field("AGENTLOOP_MODEL_LIMIT_NAME")
    """``AGENTLOOP_MODEL_LIMIT_NAME``: names the limit (Redis key ``agentloop:ratelimit:<name>``).
    Default: the model's name."""
    limit_window_seconds: float = env_field("AGENTLOOP_MODEL_LIMIT_WINDOW_SECONDS", 60.0)
    """``AGENTLOOP_MODEL_LIMIT_WINDOW_SECONDS``: the window the limits count in. Default: ``60``."""
    limit_max_wait_seconds: float = env_field("AGENTLOOP_MODEL_LIMIT_MAX_WAIT_SECONDS", 120.0)
    """``AGENTLOOP_MODEL_LIMIT_MAX_WAIT_SECONDS``: the longest a call waits for a slot. Default: ``120``."""
    key_rpm: int | None = env_field("AGENTLOOP_MODEL_KEY_RPM")
    """``AGENTLOOP_MODEL_KEY_RPM``: requests per window each concurrency key may make, on top of the
    shared limit (``docs/how-to/fairness.md``). Default: no per-key limit."""
    key_tpm: int | None = env_field("AGENTLOOP_MODEL_KEY_TPM")
    """``AGENTLOOP_MODEL_KEY_TPM``: tokens per window each concurrency key may use. Default: no limit."""
    key_token_budget: int | None = env_field("AGENTLOOP_MODEL_KEY_TOKEN_BUDGET")
    """``AGENTLOOP_MODEL_KEY_TOKEN_BUDGET``: tokens each concurrency key may use per budget period
    (a tenant's daily budget); past it its calls fail at once. Default: no budget."""
    key_budget_seconds: float = env_field("AGENTLOOP_MODEL_KEY_BUDGET_SECONDS", 86400.0)
    """``AGENTLOOP_MODEL_KEY_BUDGET_SECONDS``: the period of the per-key token budget (fixed
    windows, like the rate limits'). Default: ``86400`` (a day)."""
    redis_url: str | None = env_field("REDIS_URL")
    """``REDIS_URL``: when set, every worker shares the rate limits through this Redis."""
    provider: ProviderSettings = Field(default_factory=ProviderSettings)
    """Which provider, which model, Anthropic's connection
    (:mod:`agentloop.orchestration.settings.provider`)."""

    def key_texts(self) -> tuple[str, ...]:
        """The API keys this group holds, as text: what no record of a run may keep."""
        keys = [setting(self, row.api_key) for row in PROVIDER_TABLE.values()]
        return tuple(key.get_secret_value() for key in keys if key is not None and key.get_secret_value())

    @field_validator("openai_timeout_seconds", mode="before")
    @classmethod
    def _timeout(cls, value: Any) -> float:
        return seconds(value, "OPENAI_TIMEOUT_SECONDS", positive=True)

    @field_validator("openai_max_retries", mode="before")
    @classmethod
    def _retries(cls, value: Any) -> int:
        return count(value, "OPENAI_MAX_RETRIES")

    @field_validator("rpm", "tpm", "key_rpm", "key_tpm", "key_token_budget", mode="before")
    @classmethod
    def _positive(cls, value: Any, info: ValidationInfo) -> int:
        return count(value, cls.env_name(info.field_name), least=1)

    @field_validator("limit_window_seconds", "limit_max_wait_seconds", "key_budget_seconds", mode="before")
    @classmethod
    def _seconds(cls, value: Any, info: ValidationInfo) -> float:
        return seconds(value, cls.env_name(info.field_name), positive=True)

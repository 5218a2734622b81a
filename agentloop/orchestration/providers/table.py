"""The provider table: each model provider's name, processor, settings, errors and test server, in one row.

Every place that needs to know the providers reads :data:`PROVIDERS` (in the order a deployment
picks one by its settings, see :mod:`~agentloop.orchestration.settings.provider`):

- the settings: the names ``AGENTLOOP_MODEL_PROVIDER`` accepts, the keys no record may keep;
- :class:`~agentloop.orchestration.llm.provider.ModelProvider`: which provider the settings pick,
  its model, and the processor it builds (``processor``'s ``from_settings``);
- :func:`~agentloop.orchestration.llm.provider.describe_processor`: what a processor is;
- the ``agentloop`` front: the processor classes it loads on first use;
- the tests: each provider's errors (``errors``) and local test server (``server``).

The references are ``"module:name"`` text, imported only when asked (:func:`load`), so reading the
table loads no SDK. Settings are named by their attribute path from
:class:`~agentloop.orchestration.settings.ModelSettings` (``"provider.anthropic_api_key"``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = ["OFFLINE", "PROVIDERS", "ProviderRow", "load", "setting"]

#: The name of the model that runs without a provider (deterministic, no key, no network).
OFFLINE = "offline"


@dataclass(frozen=True, kw_only=True, slots=True)
class ProviderRow:
    """One model provider: where its code, settings, errors and test server are."""

    name: str
    """What ``AGENTLOOP_MODEL_PROVIDER`` says to choose it."""
    label: str
    """How :func:`~agentloop.orchestration.llm.provider.describe_processor` names its processors."""
    processor: str
    """``"module:Class"``: its processor, built with ``Class.from_settings(model_settings)``."""
    errors: str
    """``"module:NAME"``: the :class:`~agentloop.orchestration.llm.sdk_errors.SdkErrors` of its SDK."""
    server: str
    """``"module:Class"``: the local test server that speaks its protocol (a dialect of
    :class:`~agentloop.orchestration.testing.servers.scripted_server.ScriptedReplyServer`)."""
    api_key: str
    """The setting (a path from ``ModelSettings``) holding its key: set, it picks this provider."""
    base_url: str
    """The setting holding its server's URL: set, it picks this provider too."""
    model_setting: str | None = None
    """The setting naming its model when ``AGENTLOOP_MODEL`` is not set; else :attr:`default_model`."""
    default_model: str = ""
    """The model asked when neither ``AGENTLOOP_MODEL`` nor :attr:`model_setting` says one."""

    @property
    def processor_module(self) -> str:
        """The module that defines :attr:`processor`."""
        return self.processor.partition(":")[0]

    @property
    def processor_class(self) -> str:
        """The class name of :attr:`processor`."""
        return self.processor.partition(":")[2]


#: Every provider by name, in the order the settings pick one (OpenAI's first, as before there were two).
PROVIDERS: MappingProxyType[str, ProviderRow] = MappingProxyType(
    {
        row.name: row
        for row in (
            ProviderRow(
                name="openai",
                label="OpenAI-compatible model",
                processor="agentloop.orchestration.llm.openai.processor:OpenAIProcessor",
                errors="agentloop.orchestration.llm.openai.errors:OPENAI_ERRORS",
                server="agentloop.orchestration.testing.servers.openai_server:OpenAICompatibleServer",
                api_key="openai_api_key",
                base_url="openai_base_url",
                model_setting="openai_model",
            ),
            ProviderRow(
                name="anthropic",
                label="Anthropic model",
                processor="agentloop.orchestration.llm.anthropic.processor:AnthropicProcessor",
                errors="agentloop.orchestration.llm.anthropic.errors:ANTHROPIC_ERRORS",
                server="agentloop.orchestration.testing.servers.anthropic_server:AnthropicCompatibleServer",
                api_key="provider.anthropic_api_key",
                base_url="provider.anthropic_base_url",
                default_model="claude-haiku-4-5",
            ),
        )
    }
)


def load(reference: str) -> Any:
    """What a ``"module:name"`` reference of the table names (importing its module)."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def setting(settings: object, path: str) -> Any:
    """The value at ``path`` (``"provider.anthropic_api_key"``) of a ``ModelSettings``."""
    value = settings
    for part in path.split("."):
        value = getattr(value, part)
    return value

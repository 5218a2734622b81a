"""Tracing's settings: off unless an exporter is named.

``AGENTLOOP_TRACING_EXPORTER``: ``""`` (off, the default), ``console`` (spans printed on
stderr, for a look) or ``otlp`` (the OTLP exporter, configured by OpenTelemetry's own ``OTEL_EXPORTER_OTLP_*``
variables; needs ``opentelemetry-exporter-otlp``). ``AGENTLOOP_TRACING_CAPTURE_PROMPTS``
(off by default) puts a model call's instruction on its span.
"""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from agentloop.orchestration.settings.group import SettingsGroup, env_field

__all__ = ["TRACING_EXPORTERS", "TracingSettings"]

#: The exporters ``AGENTLOOP_TRACING_EXPORTER`` may name ("" is off).
TRACING_EXPORTERS = ("", "console", "otlp")


class TracingSettings(SettingsGroup):
    """Where a run's spans go (``orchestration/tracing/``)."""

    exporter: str = env_field("AGENTLOOP_TRACING_EXPORTER", "")
    """``AGENTLOOP_TRACING_EXPORTER``: ``""`` (no tracing), ``console`` or ``otlp``."""
    capture_prompts: bool = env_field("AGENTLOOP_TRACING_CAPTURE_PROMPTS", False)
    """``AGENTLOOP_TRACING_CAPTURE_PROMPTS``: put a model call's instruction on its span
    (``gen_ai.prompt``). Off by default: prompts may hold what a trace store must not."""

    @property
    def enabled(self) -> bool:
        return bool(self.exporter)

    @field_validator("exporter", mode="before")
    @classmethod
    def _exporter(cls, value: Any) -> str:
        name = "" if value is None else str(value).strip().lower()
        if name not in TRACING_EXPORTERS:
            raise ValueError(
                f"AGENTLOOP_TRACING_EXPORTER must be one of console, otlp or empty, not {value!r}"
            )
        return name

"""Metrics' settings: a worker's scrape port, off unless a port is named.

``AGENTLOOP_METRICS_PORT``: ``0`` (off, the default) or the port a worker serves its Prometheus
metrics on (``orchestration/metrics/``); a prefork worker's pool processes each serve their own on
the ports after it. ``AGENTLOOP_METRICS_HOST``: the address they listen on (``127.0.0.1``).
``agentloop serve`` needs neither: its metrics are its ``/metrics`` route, behind its tokens.
"""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from agentloop.orchestration.settings.group import SettingsGroup, count, env_field

__all__ = ["MetricsSettings"]


class MetricsSettings(SettingsGroup):
    """Where a worker serves its metrics (``orchestration/metrics/``)."""

    port: int = env_field("AGENTLOOP_METRICS_PORT", 0)
    """``AGENTLOOP_METRICS_PORT``: the port a worker's main process serves ``/metrics`` on; with the
    prefork pool, pool process ``i`` serves its own on the port plus ``1 + i``. Default: ``0`` (off)."""
    host: str = env_field("AGENTLOOP_METRICS_HOST", "127.0.0.1")
    """``AGENTLOOP_METRICS_HOST``: the address a worker's metrics ports listen on. Default: ``127.0.0.1``
    (this host only: the scrape is open to whoever reaches the port)."""

    @property
    def enabled(self) -> bool:
        return self.port > 0

    @field_validator("port", mode="before")
    @classmethod
    def _port(cls, value: Any) -> int:
        number = count(value, "AGENTLOOP_METRICS_PORT")
        if number > 65535:
            raise ValueError(f"AGENTLOOP_METRICS_PORT must be a port number (0-65535), not {value!r}")
        return number

"""The run store's settings: how long a store call keeps trying while the database is away.

A call to the SQL run store that fails on a connection-level error (the server
refused or dropped the connection, a lock timed out) is tried again with
exponential backoff for up to ``AGENTLOOP_STORE_RETRY_SECONDS``; then it raises
:class:`~agentloop.orchestration.errors.StoreUnavailableError`, and the task that made the
call is retried by Celery (see ``docs/deployment.md``). Errors in the data
(an integrity or data error) are never tried again.
"""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from agentloop.orchestration.settings.group import SettingsGroup, env_field, seconds

__all__ = ["DEFAULT_STORE_RETRY_SECONDS", "StoreSettings"]

#: How long a store call keeps trying by default, in seconds.
DEFAULT_STORE_RETRY_SECONDS = 60.0


class StoreSettings(SettingsGroup):
    """How the run store rides out a database that is briefly unreachable."""

    retry_seconds: float = env_field("AGENTLOOP_STORE_RETRY_SECONDS", DEFAULT_STORE_RETRY_SECONDS)
    """``AGENTLOOP_STORE_RETRY_SECONDS``: how long a store call retries a lost or refused database
    connection before giving up (``0``: no retry). Default: ``60``."""

    @field_validator("retry_seconds", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> float:
        return seconds(value, "AGENTLOOP_STORE_RETRY_SECONDS")

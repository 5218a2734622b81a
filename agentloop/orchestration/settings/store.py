"""The run store's settings: how long a store call keeps trying while the database is away.

A call to the SQL run store that fails on a connection-level error (the server
refused or dropped the connection, a lock timed out) is tried again with
exponential backoff for up to ``AGENTLOOP_STORE_RETRY_SECONDS``; then it raises
:class:`~agentloop.orchestration.errors.StoreUnavailableError`, and the task that made the
call is retried by Celery (see ``docs/deployment.md``). Errors in the data
(an integrity or data error) are never tried again.

Retention (``AGENTLOOP_RUN_RETENTION``, off by default): beat's hourly
``agentloop.prune_runs`` deletes the workflows that ended longer ago than that,
with their events, checkpoints and questions (``orchestration/store/retention.py``);
``agentloop runs prune --older-than 30d --dry-run`` shows what would go.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import field_validator

from agentloop.orchestration.settings.group import SettingsGroup, env_field, seconds

__all__ = ["DEFAULT_STORE_RETRY_SECONDS", "StoreSettings", "age_seconds"]

#: How long a store call keeps trying by default, in seconds.
DEFAULT_STORE_RETRY_SECONDS = 60.0


_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: The longest age :func:`age_seconds` takes: 100 years (36500 days). Any cut-off a run store
#: holds is within it, and its datetime arithmetic cannot overflow.
MAX_AGE_SECONDS = 36500 * 86400


def age_seconds(value: Any, name: str) -> float:
    """An age as seconds: a positive number of seconds, or ``30d``, ``12h``, ``90m``, ``2w``, ``45s``,
    at most :data:`MAX_AGE_SECONDS`; ``ValueError`` naming ``name`` otherwise."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value) if not isinstance(value, int) or value <= MAX_AGE_SECONDS else float("inf")
    else:
        found = _AGE.fullmatch(value.strip().lower()) if isinstance(value, str) else None
        if found is None:
            raise ValueError(
                f"{name} must be an age such as 30d, 12h, 90m or a number of seconds, not {value!r}"
            )
        number = float(found[1]) * _UNIT_SECONDS[found[2]]
    if not number > 0:
        raise ValueError(f"{name} must be a positive age, not {value!r}")
    if number > MAX_AGE_SECONDS:
        raise ValueError(f"{name} must be at most 100 years (36500d), not {value!r}")
    return number


class StoreSettings(SettingsGroup):
    """How the run store rides out a database that is briefly unreachable."""

    retry_seconds: float = env_field("AGENTLOOP_STORE_RETRY_SECONDS", DEFAULT_STORE_RETRY_SECONDS)
    """``AGENTLOOP_STORE_RETRY_SECONDS``: how long a store call retries a lost or refused database
    connection before giving up (``0``: no retry). Default: ``60``."""

    retention_seconds: float | None = env_field("AGENTLOOP_RUN_RETENTION", None)
    """``AGENTLOOP_RUN_RETENTION``: how long an ended workflow is kept (``30d``, ``12h``, ``90m`` or
    seconds; at most 100 years). Set, beat deletes older ones every hour with their events,
    checkpoints and questions; a workflow with a run still open is never deleted. Default: unset,
    nothing is deleted."""

    @field_validator("retry_seconds", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> float:
        return seconds(value, "AGENTLOOP_STORE_RETRY_SECONDS")

    @field_validator("retention_seconds", mode="before")
    @classmethod
    def _retention(cls, value: Any) -> float | None:
        return None if value is None else age_seconds(value, "AGENTLOOP_RUN_RETENTION")

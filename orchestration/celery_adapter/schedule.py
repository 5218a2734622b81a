"""Beat schedules of batches, as data: from ``AGENTLOOP_BEAT_SCHEDULE`` (JSON) or Python.

An entry runs ``agentloop.batch``, which fans a registered runnable out over
inputs given in the entry or produced by a registered input provider::

    [{"name": "nightly-search", "runnable": "record_search.ask",
      "crontab": "0 3 * * *",                 # minute hour day-of-month month day-of-week, UTC
      "inputs": [{"message": "..."}],         # or "provider": "open_questions", "provider_args": {...}
      "expires": 3600,                         # seconds: a tick not started by then is dropped
      "chunk_size": 100, "context": {}, "token_budget": null}]

``"every": seconds`` may replace ``"crontab"``. In a Python config, build the
same entry with :func:`batch_entry`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from celery.schedules import crontab, schedule

from actions.errors import AgentLoopError
from orchestration.wire import BATCH, RESUME_SETTLED

#: The framework's own beat entry: every minute, the paused tasks of questions answered and never
#: sent on (a resume's worker died, its broker or store stayed away) are sent again
#: (``orchestration/human/pause.py``). A schedule entry of the same name replaces it.
RESUME_SETTLED_ENTRY = "agentloop-resume-settled"


def framework_entries() -> dict[str, dict[str, Any]]:
    """The ``beat_schedule`` entries every deployment runs, beside its batches."""
    return {
        RESUME_SETTLED_ENTRY: {"task": RESUME_SETTLED, "schedule": schedule(run_every=timedelta(minutes=1))}
    }


class ScheduleError(AgentLoopError, ValueError):
    """A beat schedule entry that cannot be used, with the reason."""


def parse_crontab(expression: str) -> crontab:
    """``"m h dom mon dow"`` (five fields, UTC when ``enable_utc``) as a Celery crontab."""
    fields = expression.split()
    if len(fields) != 5:
        raise ScheduleError(f"a crontab needs 5 fields (minute hour day month weekday), got {expression!r}")
    minute, hour, day_of_month, month_of_year, day_of_week = fields
    try:
        return crontab(
            minute=minute,
            hour=hour,
            day_of_month=day_of_month,
            month_of_year=month_of_year,
            day_of_week=day_of_week,
        )
    except Exception as error:
        raise ScheduleError(f"invalid crontab {expression!r}: {error}") from None


def batch_entry(
    *,
    runnable: str,
    crontab: str | None = None,
    every: float | timedelta | None = None,
    inputs: Sequence[Any] | None = None,
    provider: str | None = None,
    provider_args: Mapping[str, Any] | None = None,
    context: Mapping[str, Any] | None = None,
    expires: float | timedelta | None = None,
    chunk_size: int = 100,
    token_budget: int | None = None,
    key: str | None = None,
) -> dict[str, Any]:
    """One ``beat_schedule`` value that runs a batch of ``runnable``."""
    if (crontab is None) == (every is None):
        raise ScheduleError(f"batch of {runnable!r}: give exactly one of 'crontab' and 'every'")
    if (inputs is None) == (provider is None):
        raise ScheduleError(f"batch of {runnable!r}: give exactly one of 'inputs' and 'provider'")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ScheduleError(f"batch of {runnable!r}: chunk_size must be a positive integer")
    if every is not None:
        seconds = every.total_seconds() if isinstance(every, timedelta) else float(every)
        if seconds <= 0:
            raise ScheduleError(f"batch of {runnable!r}: 'every' must be positive")
        when: Any = schedule(run_every=timedelta(seconds=seconds))
    else:
        assert crontab is not None
        when = parse_crontab(crontab)
    kwargs: dict[str, Any] = {
        "runnable": runnable,
        "inputs": list(inputs) if inputs is not None else None,
        "provider": provider,
        "provider_args": dict(provider_args or {}),
        "context": dict(context or {}),
        "chunk_size": chunk_size,
        "token_budget": token_budget,
        "key": key or runnable,
    }
    entry: dict[str, Any] = {"task": BATCH, "schedule": when, "kwargs": kwargs}
    if expires is not None:
        seconds = expires.total_seconds() if isinstance(expires, timedelta) else float(expires)
        entry["options"] = {"expires": seconds}
    return entry


def schedule_from_json(text: str) -> dict[str, dict[str, Any]]:
    """``AGENTLOOP_BEAT_SCHEDULE``'s JSON list as a ``beat_schedule`` mapping."""
    if not text.strip():
        return {}
    try:
        entries = json.loads(text)
    except ValueError as error:
        raise ScheduleError(f"AGENTLOOP_BEAT_SCHEDULE is not valid JSON: {error}") from None
    if not isinstance(entries, list):
        raise ScheduleError("AGENTLOOP_BEAT_SCHEDULE must be a JSON list of entries")
    result: dict[str, dict[str, Any]] = {}
    allowed = {
        "name", "runnable", "crontab", "every", "inputs", "provider", "provider_args", "context",
        "expires", "chunk_size", "token_budget",
    }  # fmt: skip
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ScheduleError(f"each schedule entry must be an object with a 'name': {entry!r}")
        unknown = set(entry) - allowed
        if unknown:
            raise ScheduleError(f"schedule entry {entry['name']!r}: unknown keys {sorted(unknown)}")
        if not isinstance(entry.get("runnable"), str):
            raise ScheduleError(f"schedule entry {entry['name']!r} needs a 'runnable'")
        name = entry["name"]
        if name in result:
            raise ScheduleError(f"two schedule entries are named {name!r}")
        options = {k: v for k, v in entry.items() if k != "name"}
        result[name] = batch_entry(key=name, **options)
    return result

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

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from celery.schedules import crontab, schedule

from agentloop.orchestration.errors import ScheduleError
from agentloop.orchestration.settings import Settings, schedule_entries
from agentloop.orchestration.wire import BATCH, PRUNE_RUNS, RESUME_SETTLED

#: The framework's own beat entry: every minute, the paused tasks of questions answered and never
#: sent on (a resume's worker died, its broker or store stayed away) are sent again
#: (``orchestration/celery_adapter/pause.py``). A schedule entry of the same name replaces it.
RESUME_SETTLED_ENTRY = "agentloop-resume-settled"
#: With ``AGENTLOOP_RUN_RETENTION`` set: every hour, the workflows that ended longer ago are deleted
#: (``orchestration/store/retention.py``). A tick not started within the hour is dropped: the next
#: one deletes the same runs.
PRUNE_RUNS_ENTRY = "agentloop-prune-runs"


def framework_entries(settings: Settings) -> dict[str, dict[str, Any]]:
    """The ``beat_schedule`` entries every deployment runs, beside its batches."""
    entries: dict[str, dict[str, Any]] = {
        RESUME_SETTLED_ENTRY: {"task": RESUME_SETTLED, "schedule": schedule(run_every=timedelta(minutes=1))}
    }
    if settings.store.retention_seconds is not None:
        entries[PRUNE_RUNS_ENTRY] = {
            "task": PRUNE_RUNS,
            "schedule": schedule(run_every=timedelta(hours=1)),
            "options": {"expires": 3600},
        }
    return entries


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
    """``AGENTLOOP_BEAT_SCHEDULE``'s JSON list (checked by
    :func:`~agentloop.orchestration.settings.schedule_entries`) as a ``beat_schedule`` mapping."""
    return {
        entry["name"]: batch_entry(key=entry["name"], **{k: v for k, v in entry.items() if k != "name"})
        for entry in schedule_entries(text)
    }

"""The deployment's settings: brokers, results, the run store, time limits, and the groups below.

``Settings(...)`` built directly reads nothing: it holds its defaults and the values it is given,
which is how a test or an embedder makes one; :func:`~agentloop.orchestration.settings.load_settings`
reads the environment into one. ``broker_url``, ``result_backend``, ``database_url`` and
``visibility_timeout`` are resolved when the object is built. ``celeryconfig.py`` says more about
the Celery ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, ClassVar

import platformdirs
from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import NoDecode

from agentloop.orchestration.errors import ScheduleError, SettingsError
from agentloop.orchestration.settings.broker import Broker
from agentloop.orchestration.settings.group import SettingsGroup as _Group
from agentloop.orchestration.settings.group import count, seconds
from agentloop.orchestration.settings.group import env_field as _env
from agentloop.orchestration.settings.http import HttpSettings
from agentloop.orchestration.settings.metrics import MetricsSettings
from agentloop.orchestration.settings.model import ModelSettings
from agentloop.orchestration.settings.store import StoreSettings
from agentloop.orchestration.settings.tracing import TracingSettings
from agentloop.orchestration.wire import WIRE_VERSION

__all__ = ["EVENT_LOOPS", "SCHEDULE_KEYS", "Settings", "default_home", "schedule_entries"]

#: The event loops a worker's tasks may run on (``AGENTLOOP_EVENT_LOOP``; ``celery_adapter/event_loops.py``).
EVENT_LOOPS = ("uvloop", "asyncio")

_APP_NAME = "agentloop"
_SQLITE_FILENAME = "agentloop.sqlite3"


def default_home() -> Path:
    """The per-user home of the default store and the demo's files: ``platformdirs``' user data
    folder (``$XDG_DATA_HOME/agentloop``, else ``~/.local/share/agentloop`` on Linux;
    ``~/Library/Application Support/agentloop`` on macOS; ``%LOCALAPPDATA%\\agentloop`` on Windows)."""
    return Path(platformdirs.user_data_dir(_APP_NAME, appauthor=False))


#: The keys a schedule entry may have (``celery_adapter/schedule.py`` says what each does).
SCHEDULE_KEYS = frozenset(
    {
        "name", "runnable", "crontab", "every", "inputs", "provider", "provider_args", "context",
        "expires", "chunk_size", "token_budget",
    }
)  # fmt: skip


def schedule_entries(text: str) -> list[dict[str, Any]]:
    """``AGENTLOOP_BEAT_SCHEDULE``'s JSON list, each entry an object with a unique ``name``, a
    ``runnable`` and only known keys (``[]`` when blank). The Celery adapter turns the entries into
    Celery's ``beat_schedule`` (``schedule_from_json``); this check needs no Celery."""
    if not text.strip():
        return []
    try:
        entries = json.loads(text)
    except ValueError as error:
        raise ScheduleError(f"AGENTLOOP_BEAT_SCHEDULE is not valid JSON: {error}") from None
    if not isinstance(entries, list):
        raise ScheduleError("AGENTLOOP_BEAT_SCHEDULE must be a JSON list of entries")
    names: set[str] = set()
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ScheduleError(f"each schedule entry must be an object with a 'name': {entry!r}")
        unknown = set(entry) - SCHEDULE_KEYS
        if unknown:
            raise ScheduleError(f"schedule entry {entry['name']!r}: unknown keys {sorted(unknown)}")
        if not isinstance(entry.get("runnable"), str):
            raise ScheduleError(f"schedule entry {entry['name']!r} needs a 'runnable'")
        if entry["name"] in names:
            raise ScheduleError(f"two schedule entries are named {entry['name']!r}")
        names.add(entry["name"])
    return entries


def _default_result_backend(values: dict[str, Any]) -> str:
    """The result backend implied by the broker when ``RESULT_BACKEND`` is not set."""
    broker, redis_url = values["broker_url"], values["redis_url"]
    if redis_url:
        return str(redis_url)
    kind = Broker.of(str(broker))
    if kind.is_redis:
        return str(broker)
    if kind.in_process:
        return "cache+memory://"
    if kind.is_amqp:
        return "rpc://"
    scheme = str(broker).split("://", 1)[0].lower()
    raise SettingsError(
        f"no result backend for broker scheme {scheme!r}: set RESULT_BACKEND or REDIS_URL "
        "(agentloop needs a result backend for chords and for following runs)"
    )


def _default_cache_url(values: dict[str, Any]) -> str:
    """The step cache implied when ``AGENTLOOP_CACHE_URL`` is not set: the result backend's Redis,
    else the broker's, else this process's memory."""
    for url in (values["result_backend"], values["broker_url"]):
        if Broker.of(str(url)).is_redis:
            return str(url)
    return "memory://"


def _sqlite_under(values: dict[str, Any]) -> str:
    return f"sqlite:///{(Path(values['home']) / _SQLITE_FILENAME).resolve()}"


class Settings(_Group):
    """Everything a deployment configures (see the module doc); frozen.

    ``broker_url``, ``result_backend``, ``database_url`` and ``visibility_timeout``
    are resolved when the object is built: they hold what is used, set or
    defaulted (``model_copy(update=...)`` does not resolve them again).
    """

    _URL_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"broker_url", "redis_url", "result_backend", "database_url", "cache_url"}
    )

    model: ModelSettings = Field(default_factory=ModelSettings)
    """The model processor's settings (their own variables)."""
    http: HttpSettings = Field(default_factory=HttpSettings)
    """``agentloop serve``'s settings: tokens, scopes, limits
    (:mod:`agentloop.orchestration.settings.http`)."""
    store: StoreSettings = Field(default_factory=StoreSettings)
    """The run store's retries (:mod:`agentloop.orchestration.settings.store`)."""
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    """Where a run's spans go (:mod:`agentloop.orchestration.settings.tracing`; off by default)."""
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    """Where a worker serves its metrics (:mod:`agentloop.orchestration.settings.metrics`; off by
    default)."""
    redis_url: str | None = _env("REDIS_URL")
    """``REDIS_URL``: alone, both broker and result backend; with ``BROKER_URL``, the result backend."""
    broker_url: str = Field(
        default_factory=lambda v: v["redis_url"] or "memory://", validation_alias="BROKER_URL"
    )
    """``BROKER_URL``: the broker. Default: ``REDIS_URL``, else ``memory://``."""
    result_backend: str = Field(default_factory=_default_result_backend, validation_alias="RESULT_BACKEND")
    """``RESULT_BACKEND``: wins over everything. Default: ``REDIS_URL``; the broker when it is Redis;
    ``cache+memory://`` on ``memory://``; ``rpc://`` on AMQP; any other broker is an error."""
    cache_url: str = Field(default_factory=_default_cache_url, validation_alias="AGENTLOOP_CACHE_URL")
    """``AGENTLOOP_CACHE_URL``: where cached steps keep their results (``runtime/step_cache.py``):
    ``redis://...``, ``memory://`` (one process) or ``none``. Default: the result backend when it
    is Redis, else the broker when it is, else ``memory://``."""
    home: Path = Field(default_factory=default_home, validation_alias="AGENTLOOP_HOME")
    """``AGENTLOOP_HOME``: the folder of the default SQLite store and the demo's files, one per user
    whatever the working folder. Default: :func:`default_home` (``~/.local/share/agentloop``)."""
    database_url: str = Field(default_factory=_sqlite_under, validation_alias="DATABASE_URL")
    """``DATABASE_URL``: the run store. Default: the file ``agentloop.sqlite3`` under ``AGENTLOOP_HOME``."""
    imports: Annotated[tuple[str, ...], NoDecode] = _env("AGENTLOOP_IMPORTS", ())
    """``AGENTLOOP_IMPORTS``: comma-separated modules that register the runnables. Default: none."""
    beat_schedule_json: str = _env("AGENTLOOP_BEAT_SCHEDULE", "")
    """``AGENTLOOP_BEAT_SCHEDULE``: the batches beat starts, a JSON list (checked by
    :func:`schedule_entries`)."""
    task_default_queue: str = _env("AGENTLOOP_TASK_DEFAULT_QUEUE", "agentloop")
    """``AGENTLOOP_TASK_DEFAULT_QUEUE``: where tasks go by default. Default: ``agentloop``."""
    task_soft_time_limit: int = _env("AGENTLOOP_TASK_SOFT_TIME_LIMIT", 900)
    """``AGENTLOOP_TASK_SOFT_TIME_LIMIT``: seconds before ``SoftTimeLimitExceeded``. Default: ``900``."""
    task_time_limit: int = _env("AGENTLOOP_TASK_TIME_LIMIT", 960)
    """``AGENTLOOP_TASK_TIME_LIMIT``: seconds before the task's process is killed. Default: ``960``."""
    visibility_timeout: int = Field(
        default_factory=lambda v: v["task_time_limit"] + 300, validation_alias="AGENTLOOP_VISIBILITY_TIMEOUT"
    )
    """``AGENTLOOP_VISIBILITY_TIMEOUT``: seconds before an unacked message is redelivered. Default: hard
    limit + 300."""
    unacked_restore_seconds: int = _env("AGENTLOOP_UNACKED_RESTORE_SECONDS", 60)
    """``AGENTLOOP_UNACKED_RESTORE_SECONDS``: Redis sweep for dead workers' messages. Default: ``60``."""
    result_backend_max_retries: int = _env("AGENTLOOP_RESULT_BACKEND_MAX_RETRIES", 20)
    """``AGENTLOOP_RESULT_BACKEND_MAX_RETRIES``: retries of storing a result. Default: ``20``."""
    result_expires: int = _env("AGENTLOOP_RESULT_EXPIRES", 7 * 24 * 3600)
    """``AGENTLOOP_RESULT_EXPIRES``: seconds results are kept. Default: ``604800`` (7 days)."""
    broker_connection_max_retries: int = _env("AGENTLOOP_BROKER_CONNECTION_MAX_RETRIES", 100)
    """``AGENTLOOP_BROKER_CONNECTION_MAX_RETRIES``: ``0`` retries forever. Default: ``100``."""
    worker_prefetch_multiplier: int = _env("AGENTLOOP_WORKER_PREFETCH_MULTIPLIER", 1)
    """``AGENTLOOP_WORKER_PREFETCH_MULTIPLIER``: messages a process reserves ahead. Default: ``1``."""
    delivery_limit: int = _env("AGENTLOOP_DELIVERY_LIMIT", 20)
    """``AGENTLOOP_DELIVERY_LIMIT``: on every broker, how often a loop may be started without saving
    a checkpoint (its worker or pool process died, its connection dropped) before it is not run
    again: the run store counts each start, and the start past the limit ends the run ``failed``
    with ``DeliveryLimitError``. On RabbitMQ it is also the queues' ``x-delivery-limit``: the
    delivery past it is refused at the worker's edge, and a message that even that delivery cannot
    settle is dead-lettered to ``<queue>.dead``. Default: ``20``."""
    checkpoint_seconds: float = _env("AGENTLOOP_CHECKPOINT_SECONDS", 0.5)
    """``AGENTLOOP_CHECKPOINT_SECONDS``: least time between checkpoints of a fast loop (``0``: every
    iteration). Default: ``0.5``."""
    wire_version_override: int | None = _env("AGENTLOOP_WIRE_VERSION_OVERRIDE", None)
    """``AGENTLOOP_WIRE_VERSION_OVERRIDE``: the wire version this process sends and reads up to,
    instead of the code's own (:data:`~agentloop.orchestration.wire.WIRE_VERSION`). For rehearsing
    a deploy with two versions of the worker, never in production: a worker told it reads a
    version its code does not know would misread those messages. Default: unset."""
    record_runs: bool = _env("AGENTLOOP_RECORD_RUNS", False)
    """``AGENTLOOP_RECORD_RUNS``: record every run launched on this deployment (its model turns,
    tool results, answers and cache hits), as ``record=True`` does for one launch, so
    ``agentloop replay`` can run it again. Default: off."""

    pack_size: int | None = _env("AGENTLOOP_PACK_SIZE", None)
    """``AGENTLOOP_PACK_SIZE``: how many branches of a composite one task runs together on one
    event loop, for composites that set no ``pack_size`` of their own, and how many consecutive
    loop stages of a pipeline one task runs one after another, for pipelines that set none
    (``docs/how-to/packing.md``); ``1`` keeps one task per branch and per stage. Default: unset,
    the packing rule decides (packs of up to 200 of the branches it finds safe to pack, or 20
    bigger packs, of up to 1,000, where more than 4,000 are; one task per branch for the others;
    a pipeline's loop stages in one task for up to a second)."""

    event_loop: str = _env("AGENTLOOP_EVENT_LOOP", "uvloop")
    """``AGENTLOOP_EVENT_LOOP``: the event loop a worker's tasks run on: ``uvloop`` (libuv's, in C:
    less CPU per packed run) or ``asyncio`` (the standard library's, for a library that misbehaves
    on uvloop). A worker where uvloop is not installed says so and runs asyncio's
    (``celery_adapter/event_loops.py``). Default: ``uvloop``."""

    fair_slots: int | None = _env("AGENTLOOP_FAIR_SLOTS", None)
    """``AGENTLOOP_FAIR_SLOTS``: the runs of concurrency keys the fleet runs at once, shared fairly:
    while ``n`` keys have work, each holds at most ``slots // n`` (and never more than its own
    limit); ``docs/how-to/fairness.md``. Default: unset (each key bounded by its limit alone)."""
    concurrency_lease_seconds: float = _env("AGENTLOOP_CONCURRENCY_LEASE_SECONDS", 3600.0)
    """``AGENTLOOP_CONCURRENCY_LEASE_SECONDS``: the longest a run holds its concurrency key's slot
    (a run ending frees it at once; the lease frees the slot of a run whose every message was lost;
    a run's ``deadline_seconds``, when longer, is its lease). Default: ``3600``."""

    @field_validator("fair_slots", mode="before")
    @classmethod
    def _fair_slots(cls, value: Any) -> int | None:
        return None if value is None or value == "" else count(value, "AGENTLOOP_FAIR_SLOTS", least=1)

    @field_validator("concurrency_lease_seconds", mode="before")
    @classmethod
    def _lease(cls, value: Any) -> float:
        return seconds(value, "AGENTLOOP_CONCURRENCY_LEASE_SECONDS")

    @field_validator("event_loop", mode="before")
    @classmethod
    def _event_loop(cls, value: Any) -> str:
        name = str(value).strip().lower()
        if name not in EVENT_LOOPS:
            raise ValueError(f"AGENTLOOP_EVENT_LOOP must be {' or '.join(EVENT_LOOPS)}, not {value!r}")
        return name

    @field_validator("pack_size", mode="before")
    @classmethod
    def _pack_size(cls, value: Any) -> int | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        return count(value, "AGENTLOOP_PACK_SIZE", least=1)

    @property
    def time_limits_set(self) -> bool:
        """Whether a task time limit was given (``AGENTLOOP_TASK_SOFT_TIME_LIMIT`` or
        ``AGENTLOOP_TASK_TIME_LIMIT``), not left at its default: the packing rule reads it."""
        return bool({"task_soft_time_limit", "task_time_limit"} & self.model_fields_set)

    @field_validator(
        "task_soft_time_limit",
        "task_time_limit",
        "visibility_timeout",
        "unacked_restore_seconds",
        "result_backend_max_retries",
        "result_expires",
        "broker_connection_max_retries",
        "worker_prefetch_multiplier",
        mode="before",
    )
    @classmethod
    def _non_negative(cls, value: Any, info: ValidationInfo) -> int:
        return count(value, cls.env_name(info.field_name))

    @field_validator("delivery_limit", mode="before")
    @classmethod
    def _positive(cls, value: Any, info: ValidationInfo) -> int:
        return count(value, cls.env_name(info.field_name), least=1)

    @field_validator("wire_version_override", mode="before")
    @classmethod
    def _wire_version(cls, value: Any) -> int | None:
        return None if value is None else count(value, "AGENTLOOP_WIRE_VERSION_OVERRIDE", least=1)

    @property
    def wire_version(self) -> int:
        """The wire version this process sends and reads up to (the override, else the code's)."""
        return self.wire_version_override or WIRE_VERSION

    @field_validator("checkpoint_seconds", mode="before")
    @classmethod
    def _checkpoint(cls, value: Any) -> float:
        return seconds(value, "AGENTLOOP_CHECKPOINT_SECONDS")

    @field_validator("cache_url", mode="after")
    @classmethod
    def _cache_url(cls, value: str) -> str:
        transport = Broker.of(value)  # named as a broker's transport is
        if not (transport.is_redis or transport.in_process or value.strip().lower() == "none"):
            scheme = value.split("://", 1)[0].lower() if "://" in value else value.strip().lower()
            raise ValueError(f"AGENTLOOP_CACHE_URL must be redis://..., memory:// or none, not {scheme!r}")
        return value

    @field_validator("imports", mode="before")
    @classmethod
    def _split_imports(cls, value: Any) -> Any:
        items = value.split(",") if isinstance(value, str) else value
        if isinstance(items, list | tuple):
            return tuple(name.strip() for name in items if isinstance(name, str) and name.strip())
        return items

    @field_validator("home", mode="after")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()

    @field_validator("beat_schedule_json", mode="after")
    @classmethod
    def _valid_schedule(cls, value: str) -> str:
        schedule_entries(value)
        return value

    @model_validator(mode="after")
    def _limits_in_order(self) -> Settings:
        soft, hard, visibility = self.task_soft_time_limit, self.task_time_limit, self.visibility_timeout
        if soft >= hard:
            raise ValueError(
                f"AGENTLOOP_TASK_SOFT_TIME_LIMIT ({soft}) must be below AGENTLOOP_TASK_TIME_LIMIT ({hard})"
            )
        if visibility <= hard:
            raise ValueError(
                f"AGENTLOOP_VISIBILITY_TIMEOUT ({visibility}) must exceed AGENTLOOP_TASK_TIME_LIMIT "
                f"({hard}): a task still running would be delivered twice"
            )
        return self

"""The deployment's settings: every environment variable agentloop reads, read here and nowhere else.

:func:`load_settings` reads the environment (or a mapping standing for it) once
and returns a frozen :class:`Settings`; every other part receives that object
(``celeryconfig.py`` projects it for Celery). ``Settings(...)`` built directly
reads nothing: it holds its defaults and the values it is given, which is how a
test or an embedder makes one.

Every variable is optional, and an empty or blank value counts as unset. A
malformed value raises :class:`SettingsError`, whose message names the variable.
``repr(settings)`` shows no secret and no password of a URL. Each field's
docstring names its variable and its default; ``celeryconfig.py`` says more
about the Celery ones, :func:`env_names` lists them all.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

import platformdirs
from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode

from actions.errors import AgentLoopError
from orchestration.celery_adapter.schedule import schedule_from_json
from orchestration.settings_group import SettingsGroup as _Group
from orchestration.settings_group import as_float as _as_float
from orchestration.settings_group import as_int as _as_int
from orchestration.settings_group import env_field as _env
from orchestration.settings_http import HttpSettings
from orchestration.settings_provider import ProviderSettings
from orchestration.settings_store import StoreSettings
from orchestration.settings_tracing import TracingSettings

__all__ = [
    "ModelSettings",
    "Settings",
    "SettingsError",
    "default_home",
    "env_names",
    "load_settings",
]

G = TypeVar("G", bound=_Group)
_APP_NAME = "agentloop"
_SQLITE_FILENAME = "agentloop.sqlite3"


def default_home() -> Path:
    """The per-user home of the default store and the demo's files: ``platformdirs``' user data
    folder (``$XDG_DATA_HOME/agentloop``, else ``~/.local/share/agentloop`` on Linux;
    ``~/Library/Application Support/agentloop`` on macOS; ``%LOCALAPPDATA%\\agentloop`` on Windows)."""
    return Path(platformdirs.user_data_dir(_APP_NAME, appauthor=False))


class SettingsError(AgentLoopError, ValueError):
    """A malformed setting; the message names the environment variable and the value."""


class ModelSettings(_Group):
    """How the model processor is built: the OpenAI-compatible server and the shared rate limits."""

    _URL_FIELDS: ClassVar[frozenset[str]] = frozenset({"openai_base_url", "redis_url"})

    openai_api_key: SecretStr | None = _env("OPENAI_API_KEY")
    """``OPENAI_API_KEY``: with it or a base URL the OpenAI processor runs, else the offline model."""
    openai_base_url: str | None = _env("OPENAI_BASE_URL")
    """``OPENAI_BASE_URL``: an OpenAI-compatible server (a local one needs no key). Default: OpenAI's."""
    openai_model: str = _env("OPENAI_MODEL", "gpt-4o-mini")
    """``OPENAI_MODEL``: the model name sent with every request. Default: ``gpt-4o-mini``."""
    openai_timeout_seconds: float = _env("OPENAI_TIMEOUT_SECONDS", 60.0)
    """``OPENAI_TIMEOUT_SECONDS``: the timeout of each attempt. Default: ``60``."""
    openai_max_retries: int = _env("OPENAI_MAX_RETRIES", 3)
    """``OPENAI_MAX_RETRIES``: retries of a 408/409/429/5xx or connection failure. Default: ``3``."""
    rpm: int | None = _env("AGENTLOOP_MODEL_RPM")
    """``AGENTLOOP_MODEL_RPM``: requests per minute (per window) allowed. Default: no limit."""
    tpm: int | None = _env("AGENTLOOP_MODEL_TPM")
    """``AGENTLOOP_MODEL_TPM``: tokens per minute (per window) allowed. Default: no limit."""
    limit_name: str | None = _env("AGENTLOOP_MODEL_LIMIT_NAME")
    """``AGENTLOOP_MODEL_LIMIT_NAME``: names the limit (Redis key ``agentloop:ratelimit:<name>``).
    Default: the model's name."""
    limit_window_seconds: float = _env("AGENTLOOP_MODEL_LIMIT_WINDOW_SECONDS", 60.0)
    """``AGENTLOOP_MODEL_LIMIT_WINDOW_SECONDS``: the window the limits count in. Default: ``60``."""
    limit_max_wait_seconds: float = _env("AGENTLOOP_MODEL_LIMIT_MAX_WAIT_SECONDS", 120.0)
    """``AGENTLOOP_MODEL_LIMIT_MAX_WAIT_SECONDS``: the longest a call waits for a slot. Default: ``120``."""
    redis_url: str | None = _env("REDIS_URL")
    """``REDIS_URL``: when set, every worker shares the rate limits through this Redis."""
    provider: ProviderSettings = Field(default_factory=ProviderSettings)
    """Which provider, which model, Anthropic's connection (:mod:`orchestration.settings_provider`)."""

    @field_validator("openai_timeout_seconds", mode="before")
    @classmethod
    def _timeout(cls, value: Any) -> float:
        number = _as_float(value)
        if number is None:
            raise ValueError(f"OPENAI_TIMEOUT_SECONDS must be a number of seconds, not {value!r}")
        return number

    @field_validator("openai_max_retries", mode="before")
    @classmethod
    def _retries(cls, value: Any) -> int:
        number = _as_int(value)
        if number is None or number < 0:
            raise ValueError(f"OPENAI_MAX_RETRIES must be a non-negative integer, not {value!r}")
        return number

    @field_validator("rpm", "tpm", mode="before")
    @classmethod
    def _positive(cls, value: Any, info: ValidationInfo) -> int:
        number = _as_int(value)
        if number is None or number <= 0:
            raise ValueError(f"{cls.env_name(info.field_name)} must be a positive integer, not {value!r}")
        return number

    @field_validator("limit_window_seconds", "limit_max_wait_seconds", mode="before")
    @classmethod
    def _seconds(cls, value: Any, info: ValidationInfo) -> float:
        number = _as_float(value)
        if number is None or not 0 < number < math.inf:
            name = cls.env_name(info.field_name)
            raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        return number


def _scheme(url: str) -> str:
    """The transport part of a URL's scheme: ``amqp`` for ``amqp://...``, ``redis`` for ``rediss``."""
    scheme = url.split("://", 1)[0].lower().split("+")[0]
    return {"rediss": "redis", "pyamqp": "amqp", "amqps": "amqp"}.get(scheme, scheme)


def _default_result_backend(values: dict[str, Any]) -> str:
    """The result backend implied by the broker when ``RESULT_BACKEND`` is not set."""
    broker, redis_url = values["broker_url"], values["redis_url"]
    if redis_url:
        return str(redis_url)
    kind = _scheme(broker)
    if kind == "redis":
        return str(broker)
    if kind == "memory":
        return "cache+memory://"
    if kind == "amqp":
        return "rpc://"
    raise SettingsError(
        f"no result backend for broker scheme {kind!r}: set RESULT_BACKEND or REDIS_URL "
        "(agentloop needs a result backend for chords and for following runs)"
    )


def _default_cache_url(values: dict[str, Any]) -> str:
    """The step cache implied when ``AGENTLOOP_CACHE_URL`` is not set: the result backend's Redis,
    else the broker's, else this process's memory."""
    for url in (values["result_backend"], values["broker_url"]):
        if _scheme(str(url)) == "redis":
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
    """``agentloop serve``'s settings: tokens, scopes, limits (:mod:`orchestration.settings_http`)."""
    store: StoreSettings = Field(default_factory=StoreSettings)
    """The run store's retries (:mod:`orchestration.settings_store`)."""
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    """Where a run's spans go (:mod:`orchestration.settings_tracing`; off by default)."""
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
    """``AGENTLOOP_CACHE_URL``: where cached steps keep their results (``orchestration/cache.py``):
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
    """``AGENTLOOP_BEAT_SCHEDULE``: the batches beat starts, a JSON list (parsed: :attr:`beat_schedule`)."""
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
    checkpoint_seconds: float = _env("AGENTLOOP_CHECKPOINT_SECONDS", 0.5)
    """``AGENTLOOP_CHECKPOINT_SECONDS``: least time between checkpoints of a fast loop (``0``: every
    iteration). Default: ``0.5``."""

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
        name, number = cls.env_name(info.field_name), _as_int(value)
        if number is None:
            raise ValueError(f"{name} must be an integer, got {value!r}")
        if number < 0:
            raise ValueError(f"{name} must not be negative, got {number}")
        return number

    @field_validator("checkpoint_seconds", mode="before")
    @classmethod
    def _checkpoint(cls, value: Any) -> float:
        number = _as_float(value)
        if number is None or not 0 <= number < math.inf:
            raise ValueError(
                f"AGENTLOOP_CHECKPOINT_SECONDS must be a non-negative number of seconds, not {value!r}"
            )
        return number

    @field_validator("cache_url", mode="after")
    @classmethod
    def _cache_url(cls, value: str) -> str:
        scheme = value.split("://", 1)[0].lower() if "://" in value else value.strip().lower()
        if scheme not in ("redis", "rediss", "memory", "none"):
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
        schedule_from_json(value)
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

    @property
    def beat_schedule(self) -> dict[str, dict[str, Any]]:
        """``AGENTLOOP_BEAT_SCHEDULE`` as Celery's ``beat_schedule`` (a new mapping on every call)."""
        return schedule_from_json(self.beat_schedule_json)


class _MappingSource(EnvSettingsSource):
    """pydantic-settings' environment source, over a given mapping instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {name: value for name, value in self._environ.items() if value.strip()}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """A field's variable; a field without one (a group such as ``model``) reads nothing."""
        if not isinstance(field.validation_alias, str):
            return None, field_name, False
        return super().get_field_value(field, field_name)


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings the environment asks for (``environ`` defaults to ``os.environ``).

    Raises :class:`SettingsError` naming every malformed variable.
    """
    env = os.environ if environ is None else environ
    problems: list[str] = []
    model, http = _group(ModelSettings, env, problems), _group(HttpSettings, env, problems)
    model = model.model_copy(update={"provider": _group(ProviderSettings, env, problems)})
    store, tracing = _group(StoreSettings, env, problems), _group(TracingSettings, env, problems)
    try:
        groups: dict[str, Any] = {"model": model, "http": http, "store": store, "tracing": tracing}
        settings = Settings(**groups, **_MappingSource(Settings, env)())
    except ValidationError as error:
        problems.append(_describe(error))
    except SettingsError as error:  # raised while resolving a default (no result backend)
        problems.append(str(error))
    if problems:
        raise SettingsError("; ".join(problems))
    return settings


def _group(group: type[G], env: Mapping[str, str], problems: list[str]) -> G:
    """The group read from ``env``; its defaults, and its problems added to ``problems``, when malformed."""
    try:
        return group(**_MappingSource(group, env)())
    except ValidationError as error:
        problems.append(_describe(error))
        return group()


def _describe(error: ValidationError) -> str:
    """One line per problem, in the words of the validators (pydantic's own wording otherwise)."""
    problems = []
    for detail in error.errors():
        if detail["type"] == "default_factory_not_called":
            continue  # follows from another problem, already reported
        cause = (detail.get("ctx") or {}).get("error")
        if isinstance(cause, Exception):
            problems.append(str(cause))
        else:
            where = ".".join(str(part) for part in detail["loc"])
            problems.append(f"{where}: {detail['msg']}" if where else detail["msg"])
    return "; ".join(dict.fromkeys(problems)) or str(error)


def env_names() -> tuple[str, ...]:
    """Every environment variable :func:`load_settings` reads, in field order."""
    names: list[str] = []
    groups = ("model", "http", "provider", "store", "tracing")
    for group in (Settings, ModelSettings, ProviderSettings, HttpSettings, StoreSettings, TracingSettings):
        names += [group.env_name(f) for f in group.model_fields if f not in groups]
    return tuple(dict.fromkeys(names))

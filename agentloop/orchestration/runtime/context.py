"""``standard_context``: the context most workflows need, from the settings, in one call.

::

    from agentloop import register, standard_context

    register("trips.plan", PlanTripLoop, context_factory=standard_context)

A :class:`StandardContext` holds what the framework's steps read from
``context`` (:func:`agentloop.actions.context_value`):

- ``processor``: a new processor from the process's
  :class:`~agentloop.orchestration.llm.provider.ModelProvider` (OpenAI or a compatible server,
  Anthropic, or the offline model without a key; rate-limited when
  configured; every processor of the process shares one limiter);
- ``tool_store``: the ``AiTool`` table on ``DATABASE_URL``, where forced-tool
  actions read their schemas (``agentloop tools sync`` writes the typed ones);
- ``run_store``: the run store on the same database;
- ``history_messages``, ``documents``, ``files``: from the JSON context spec,
  empty by default (no other key is accepted: a spec never carries secrets);
- ``meter``: the token meter of the running step (the one the runner installs:
  in-process an :class:`~actions.InMemoryUsageMeter`, on Celery the run store's),
  for code that calls a model outside an action and must report its usage.

:func:`standard_context` builds it with the process's
:class:`StandardContextFactory` (settings read from the environment once, the
database opened and migrated on first use). An application whose steps need
more subclasses :class:`StandardContext` and builds it with
:meth:`StandardContext.extend`::

    @dataclass(frozen=True, kw_only=True)
    class TripContext(StandardContext):
        maps: MapsClient

    def build_context(spec):
        return standard_context(spec).extend(TripContext, maps=MapsClient())

A test builds one around a scripted model, without a database:
``StandardContext(processor=ScriptedModel([...]), tool_store=InMemoryToolStore(...))``.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from agentloop.actions.model import ModelProcessor
from agentloop.actions.usage import UsageMeter, current_meter

if TYPE_CHECKING:
    from agentloop.orchestration.llm.provider import ModelProvider
    from agentloop.orchestration.settings import Settings
    from agentloop.orchestration.store import RunStore, SqlRunStore, SqlToolStore, ToolStore

#: The keys a context spec may give a :class:`StandardContext`.
SPEC_KEYS = ("history_messages", "documents", "files")

C = TypeVar("C", bound="StandardContext")


@dataclass(frozen=True, kw_only=True)
class StandardContext:
    """The processor, tool store and run store a workflow's steps read (see the module doc)."""

    processor: ModelProcessor
    tool_store: ToolStore | None = None
    run_store: RunStore | None = None
    history_messages: Sequence[Mapping[str, Any]] = ()
    documents: Sequence[Any] = ()
    files: Sequence[Any] = ()

    @property
    def meter(self) -> UsageMeter | None:
        """The running step's token meter (``None`` outside a run)."""
        return current_meter()

    def extend(self, cls: type[C], **fields: Any) -> C:
        """This context as a ``cls`` (a subclass of :class:`StandardContext`) with ``fields``
        added or replaced."""
        if not (isinstance(cls, type) and issubclass(cls, StandardContext)):
            raise TypeError(f"extend() takes a subclass of StandardContext, not {cls!r}")
        base = {field.name: getattr(self, field.name) for field in dataclasses.fields(StandardContext)}
        return cls(**{**base, **fields})


def spec_values(spec: Mapping[str, Any]) -> dict[str, tuple[Any, ...]]:
    """The values a spec gives a :class:`StandardContext`; ``ValueError`` for any other key, or one
    that is not a list."""
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise ValueError(
            f"unknown context spec keys {unknown}; the standard context takes only {list(SPEC_KEYS)} "
            "(keys and other secrets come from the worker's environment; extend the context for more)"
        )
    values: dict[str, tuple[Any, ...]] = {}
    for key in SPEC_KEYS:
        value = spec.get(key)
        if value is None:
            continue
        if not isinstance(value, list | tuple):
            raise ValueError(f"context spec {key!r} must be a list, not {type(value).__name__}")
        values[key] = tuple(value)
    return values


class StandardContextFactory:
    """Builds :class:`StandardContext` values for one process: one model provider, one database.

    ``settings`` default to :func:`~agentloop.orchestration.settings.load_settings` (read on first
    use); ``offline`` builds the model used without a key (default a plain
    :class:`~agentloop.orchestration.llm.offline.OfflineModel`). The stores are opened, and the database
    migrated, on the first call; :meth:`close` lets them go.
    """

    def __init__(
        self, settings: Settings | None = None, *, offline: Callable[[], ModelProcessor] | None = None
    ) -> None:
        self._settings = settings
        self._offline = offline
        self._lock = threading.Lock()
        self._provider: ModelProvider | None = None
        self._stores: tuple[SqlRunStore, SqlToolStore] | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from agentloop.orchestration.settings import load_settings

            self._settings = load_settings()
        return self._settings

    @property
    def provider(self) -> ModelProvider:
        """The process's model provider (its processors share one rate limiter)."""
        with self._lock:
            if self._provider is None:
                from agentloop.orchestration.llm.provider import ModelProvider

                self._provider = ModelProvider(self.settings.model, offline=self._offline)
            return self._provider

    @property
    def stores(self) -> tuple[SqlRunStore, SqlToolStore]:
        """The run store and the tool store on the settings' database (opened on first use)."""
        with self._lock:
            if self._stores is None:
                from agentloop.orchestration.store import database_url, open_store

                self._stores = open_store(database_url(self.settings))
            return self._stores

    def __call__(self, spec: Mapping[str, Any] | None = None) -> StandardContext:
        """A context for one run (or one task): a new processor, the process's stores, the spec's values."""
        values = spec_values(spec or {})
        run_store, tool_store = self.stores
        return StandardContext(
            processor=self.provider.processor(), tool_store=tool_store, run_store=run_store, **values
        )

    def close(self) -> None:
        """Dispose the database engine and the provider's limiter connections (reopened on next use)."""
        with self._lock:
            stores, self._stores = self._stores, None
            provider = self._provider
        if stores is not None:
            stores[0].engine.dispose()
        if provider is not None:
            provider.close()


@functools.cache
def process_context_factory() -> StandardContextFactory:
    """The :class:`StandardContextFactory` of this process, on the environment's settings."""
    return StandardContextFactory()


def standard_context(spec: Mapping[str, Any] | None = None) -> StandardContext:
    """The standard context for ``spec`` (see the module doc); usable as ``context_factory=``."""
    return process_context_factory()(spec)

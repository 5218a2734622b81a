"""What the tasks of one app share in a worker process: settings, the registry, the run store,
the step cache."""

from __future__ import annotations

import threading

from celery import Celery
from sqlalchemy import Engine

from agentloop.actions.caching import StepCache
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.runtime.step_cache import step_cache_for
from agentloop.orchestration.settings import Settings
from agentloop.orchestration.store import RunStore, StoreRetry, open_store
from agentloop.orchestration.store.waits import WaitStore, wait_store_for

__all__ = ["AppDependencies", "dependencies_of"]


class AppDependencies:
    """The settings, registry and run store the tasks of one app share in a process.

    The registry (from the modules in ``settings.imports``) and the store (on
    ``settings.database_url``) are built on first use when not given, so a
    prefork worker's children each open their own database connections.
    """

    def __init__(
        self,
        *,
        settings: Settings,
        registry: RunnableRegistry | None = None,
        store: RunStore | None = None,
    ) -> None:
        self.settings = settings
        self._registry, self._store = registry, store
        self._lock = threading.Lock()
        self._waits: WaitStore | None = None
        self._cache: tuple[StepCache | None] | None = None

    @property
    def registry(self) -> RunnableRegistry:
        with self._lock:
            if self._registry is None:
                self._registry = RunnableRegistry.from_modules(self.settings.imports)
            return self._registry

    @property
    def store(self) -> RunStore:
        with self._lock:
            if self._store is None:
                retry = StoreRetry(self.settings.store.retry_seconds)
                self._store, _ = open_store(self.settings.database_url, retry=retry)
            return self._store

    def release_connections(self) -> None:
        """Close the run store's pooled database connections; its next call opens one again.

        For the worker's main process, which makes one store call now and then (a task's
        ``on_failure`` after the hard time limit killed its pool child) and forks pool children:
        it keeps no connection open between such calls.
        """
        with self._lock:
            engine = getattr(self._store, "engine", None)
        if isinstance(engine, Engine):
            engine.dispose()

    @property
    def waits(self) -> WaitStore | None:
        """The questions the runs ask people, beside the run store
        (``orchestration/celery_adapter/pause.py``, ``orchestration/store/waits.py``)."""
        store = self.store
        with self._lock:
            if self._waits is None:
                self._waits = wait_store_for(store)
            return self._waits

    @property
    def step_cache(self) -> StepCache | None:
        """Where cached steps keep their results: ``settings.cache_url`` (``runtime/step_cache.py``),
        built on first use, so each prefork child opens its own Redis connections."""
        with self._lock:
            if self._cache is None:
                self._cache = (step_cache_for(self.settings.cache_url),)
            return self._cache[0]


def dependencies_of(app: Celery) -> AppDependencies:
    """The :class:`AppDependencies` of an app built by :func:`create_app`."""
    deps = getattr(app, "agentloop_dependencies", None)
    if not isinstance(deps, AppDependencies):
        raise TypeError(f"{app!r} was not built by orchestration.celery_adapter.app.create_app")
    return deps

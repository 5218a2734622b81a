"""Runnables reachable on Celery, by name.

A message can name only what is registered here. ``register`` also registers,
under derived names, the stages of a pipeline and the ``includes`` a
composite's branches may use (they share the parent's context factory), so
the worker can run each as its own task. Nothing else can be named: a name is
a key in this table, never an import path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from actions.errors import AgentLoopError
from loops.contract import Runnable
from pipelines.composite import BaseCompositeAgent
from pipelines.pipeline import BaseAgentPipeline

#: Rebuilds the real context inside a worker from the JSON context spec.
ContextFactory = Callable[[Mapping[str, Any]], Any]


class UnknownRunnableError(AgentLoopError, LookupError):
    """A message or a call named a runnable that is not registered."""

    def __init__(self, name: object, known: Iterable[str]) -> None:
        self.name = name
        self.known = tuple(sorted(known))
        super().__init__(f"unknown runnable {name!r}; registered: {', '.join(self.known) or '(none)'}")


class ContextSpecError(AgentLoopError, ValueError):
    """A context spec that is not a JSON object, or that the factory rejected."""


def default_context_factory(spec: Mapping[str, Any]) -> Any:
    """Without a factory the context is the spec itself, as a plain dict."""
    return dict(spec)


@dataclass(frozen=True, kw_only=True, slots=True)
class Registration:
    name: str
    runnable: type[Runnable]
    context_factory: ContextFactory

    def build_context(self, spec: Mapping[str, Any] | None) -> Any:
        if spec is None:
            spec = {}
        if not isinstance(spec, Mapping):
            raise ContextSpecError(f"the context spec must be a JSON object, got {type(spec).__name__}")
        try:
            return self.context_factory(spec)
        except ContextSpecError:
            raise
        except Exception as error:
            raise ContextSpecError(f"context factory of {self.name!r} rejected the spec: {error}") from error


def derived_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class RunnableRegistry:
    """Name <-> runnable class, with each one's context factory."""

    def __init__(self) -> None:
        self._by_name: dict[str, Registration] = {}
        self._by_class: dict[type, Registration] = {}
        self._lock = threading.Lock()

    def register(
        self,
        name: str,
        runnable: type[Runnable],
        *,
        context_factory: ContextFactory | None = None,
        includes: Iterable[type[Runnable]] = (),
    ) -> Registration:
        """Make ``runnable`` reachable as ``name``; its stages and ``includes`` come along."""
        if not isinstance(name, str) or not name:
            raise ValueError("a runnable name must be a non-empty string")
        if not isinstance(runnable, type) or not callable(getattr(runnable, "create", None)):
            raise TypeError(f"{runnable!r} is not a runnable class")
        factory = context_factory or default_context_factory
        with self._lock:
            registration = self._add(name, runnable, factory, explicit=True)
            pending = [*self._children(runnable), *includes]
            while pending:
                child = pending.pop()
                if child in self._by_class:
                    continue
                self._add(derived_name(child), child, factory, explicit=False)
                pending.extend(self._children(child))
        return registration

    def _add(self, name: str, runnable: type, factory: ContextFactory, *, explicit: bool) -> Registration:
        existing = self._by_name.get(name)
        if existing is not None and existing.runnable is not runnable:
            raise ValueError(
                f"runnable name {name!r} is already registered for {existing.runnable.__qualname__}"
            )
        registration = Registration(name=name, runnable=runnable, context_factory=factory)
        self._by_name[name] = registration
        if explicit or runnable not in self._by_class:
            self._by_class[runnable] = registration
        return registration

    @staticmethod
    def _children(runnable: type) -> list[type[Runnable]]:
        children: list[type[Runnable]] = []
        if issubclass(runnable, BaseAgentPipeline):
            children.extend(runnable.stages)
        if issubclass(runnable, BaseCompositeAgent):
            children.extend(getattr(runnable, "branch_runnables", ()))
        return children

    def get(self, name: object) -> Registration:
        if not isinstance(name, str) or name not in self._by_name:
            raise UnknownRunnableError(name, self._by_name)
        return self._by_name[name]

    def name_of(self, runnable: type) -> str:
        """The registered name of a class (a stage or branch met at run time)."""
        registration = self._by_class.get(runnable)
        if registration is None:
            raise UnknownRunnableError(
                derived_name(runnable),
                self._by_name,
            )
        return registration.name

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._by_name

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._by_name))

    def unregister(self, name: str) -> None:
        with self._lock:
            registration = self._by_name.pop(name, None)
            if registration is not None and self._by_class.get(registration.runnable) is registration:
                del self._by_class[registration.runnable]


#: The process-wide registry the tasks read; deployments fill it from ``AGENTLOOP_IMPORTS`` modules.
registry = RunnableRegistry()


def register(
    name: str,
    runnable: type[Runnable],
    *,
    context_factory: ContextFactory | None = None,
    includes: Iterable[type[Runnable]] = (),
) -> Registration:
    """Register ``runnable`` as ``name`` in the process-wide :data:`registry`."""
    return registry.register(name, runnable, context_factory=context_factory, includes=includes)

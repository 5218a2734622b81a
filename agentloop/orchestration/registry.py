"""Runnables reachable on Celery, by name, and the batch input providers.

A message can name only what a :class:`RunnableRegistry` holds. Registering a
runnable also registers, under derived names, the stages of a pipeline and the
``branch_runnables`` / ``includes`` a composite's branches may use (they share
the parent's context factory), so the worker can run each as its own task.
Nothing else can be named: a name is a key in this table, never an import path.

There is no process-wide registry. A deployment module *declares* what it
offers with :func:`register` (and :func:`input_provider`), which only marks the
class or function; the app factory builds its registry from the modules listed
in ``AGENTLOOP_IMPORTS`` with :meth:`RunnableRegistry.from_modules`. Tests and
embedders build a registry by hand and pass it to ``create_app``.
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from agentloop.actions.errors import AgentLoopError
from agentloop.loops.contract import Runnable
from agentloop.orchestration.errors import ContextSpecError, UnknownInputProviderError, UnknownRunnableError
from agentloop.orchestration.fairness.rules import Concurrency
from agentloop.pipelines.composite import BaseCompositeAgent
from agentloop.pipelines.pipeline import BaseAgentPipeline

#: Rebuilds the real context inside a worker from the JSON context spec.
ContextFactory = Callable[[Mapping[str, Any]], Any]
#: Yields a batch's inputs (``agentloop.batch`` with ``provider=NAME``), called with its ``provider_args``.
InputProvider = Callable[..., Iterable[Any]]

R = TypeVar("R", bound=type)
F = TypeVar("F", bound=Callable[..., Iterable[Any]])

_DECLARED = "__agentloop_registrations__"
_PROVIDES = "__agentloop_input_provider__"


def default_context_factory(spec: Mapping[str, Any]) -> Any:
    """Without a factory the context is the spec itself, as a plain dict."""
    return dict(spec)


@dataclass(frozen=True, kw_only=True, slots=True)
class Registration:
    name: str
    runnable: type[Runnable]
    context_factory: ContextFactory
    #: How its runs share the fleet under their concurrency key (``orchestration/fairness/``).
    concurrency: Concurrency | None = None

    def build_context(self, spec: Mapping[str, Any] | None) -> Any:
        if spec is None:
            spec = {}
        if not isinstance(spec, Mapping):
            raise ContextSpecError(f"the context spec must be a JSON object, got {type(spec).__name__}")
        try:
            return self.context_factory(spec)
        except AgentLoopError:  # a ContextSpecError, or an error of the framework that says what it is
            raise
        except (ValueError, TypeError, LookupError) as error:  # the factory's word on the spec's content
            raise ContextSpecError(f"context factory of {self.name!r} rejected the spec: {error}") from error
        # anything else (a database that failed, a bug in the factory) passes as it is


def derived_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


#: The class attributes that name a runnable's parts, and how to write each.
_PART_ATTRIBUTES = (
    (BaseAgentPipeline, "stages", "stages = (FirstStage, SecondStage)"),
    (BaseCompositeAgent, "branch_runnables", "branch_runnables = (BranchLoop, OtherBranchLoop)"),
)


def _is_runnable_class(value: object) -> bool:
    return isinstance(value, type) and callable(getattr(value, "create", None))


def _parts_of(runnable: type) -> list[type[Runnable]]:
    """A pipeline's ``stages`` and a composite's ``branch_runnables``, read from the class.

    The registry reads them before any instance exists, so they must be class
    attributes holding runnable classes. ``TypeError`` says what to write
    instead for anything else (a ``@property``, a method, a name, an instance).
    """
    parts: list[type[Runnable]] = []
    for base, attribute, example in _PART_ATTRIBUTES:
        if not issubclass(runnable, base):
            continue
        value = getattr(runnable, attribute, ())
        where = f"{runnable.__qualname__}.{attribute}"
        if isinstance(value, property | functools.cached_property):
            raise TypeError(
                f"{where} is a property, but the registry reads it from the class, before any instance "
                f"exists: write it as a class attribute, `{example}`"
            )
        if not isinstance(value, tuple | list):
            kind = type(value).__name__
            raise TypeError(f"{where} must be a tuple of runnable classes (`{example}`), not {kind}")
        for index, part in enumerate(value):
            if not _is_runnable_class(part):
                raise TypeError(f"{where}[{index}] is {part!r}, not a runnable class (`{example}`)")
        parts.extend(value)
    return parts


def _check_parts(runnable: type, includes: Iterable[type[Runnable]]) -> None:
    """Read the parts of ``runnable``, its ``includes`` and theirs, once each (``TypeError`` on a bad one)."""
    pending, seen = [runnable, *includes], set()
    while pending:
        current = pending.pop()
        if current not in seen:
            if not _is_runnable_class(current):
                raise TypeError(f"{current!r} is not a runnable class")
            seen.add(current)
            pending.extend(_parts_of(current))


class RunnableRegistry:
    """Name <-> runnable class, with each one's context factory."""

    def __init__(self) -> None:
        self._by_name: dict[str, Registration] = {}
        self._by_class: dict[type, Registration] = {}
        self._providers: dict[str, InputProvider] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_modules(cls, modules: Sequence[str]) -> RunnableRegistry:
        """A registry of everything the modules ``modules`` declare (see :func:`register`)."""
        registry = cls()
        for module_name in modules:
            registry.include_module(module_name)
        return registry

    def include_module(self, module_name: str) -> None:
        """Import ``module_name`` and add the runnables and input providers it declares."""
        module = importlib.import_module(module_name)
        for value in list(vars(module).values()):
            for declaration in _declarations(value):
                self.register(
                    declaration.name,
                    value,
                    context_factory=declaration.context_factory,
                    includes=declaration.includes,
                    concurrency=declaration.concurrency,
                )
            provided = getattr(value, _PROVIDES, None) if callable(value) else None
            if isinstance(provided, str):
                self.register_input_provider(provided, value)

    def register_input_provider(self, name: str, provider: InputProvider) -> None:
        """Make ``provider`` the source of inputs of batches that name ``name``."""
        if not isinstance(name, str) or not name or not callable(provider):
            raise ValueError("an input provider needs a non-empty name and a callable")
        with self._lock:
            self._providers[name] = provider

    def input_provider(self, name: object) -> InputProvider:
        """The input provider registered as ``name``."""
        if not isinstance(name, str) or name not in self._providers:
            known = ", ".join(sorted(self._providers)) or "(none)"
            raise UnknownInputProviderError(f"unknown input provider {name!r}; registered: {known}")
        return self._providers[name]

    def register(
        self,
        name: str,
        runnable: type[Runnable],
        *,
        context_factory: ContextFactory | None = None,
        includes: Iterable[type[Runnable]] = (),
        concurrency: Concurrency | None = None,
    ) -> Registration:
        """Make ``runnable`` reachable as ``name``; its stages and ``includes`` come along
        (``concurrency``: how its runs share the fleet, ``docs/how-to/fairness.md``)."""
        if concurrency is not None and not isinstance(concurrency, Concurrency):
            raise TypeError(f"concurrency must be a Concurrency, got {type(concurrency).__name__}")
        if not isinstance(name, str) or not name:
            raise ValueError("a runnable name must be a non-empty string")
        if not _is_runnable_class(runnable):
            raise TypeError(f"{runnable!r} is not a runnable class")
        includes = tuple(includes)
        _check_parts(runnable, includes)
        factory = context_factory or default_context_factory
        with self._lock:
            registration = self._add(name, runnable, factory, explicit=True, concurrency=concurrency)
            pending = [*_parts_of(runnable), *includes]
            while pending:
                child = pending.pop()
                if child in self._by_class:
                    continue
                self._add(derived_name(child), child, factory, explicit=False)
                pending.extend(_parts_of(child))
        return registration

    def _add(
        self,
        name: str,
        runnable: type,
        factory: ContextFactory,
        *,
        explicit: bool,
        concurrency: Concurrency | None = None,
    ) -> Registration:
        existing = self._by_name.get(name)
        if existing is not None and existing.runnable is not runnable:
            raise ValueError(
                f"runnable name {name!r} is already registered for {existing.runnable.__qualname__}"
            )
        registration = Registration(
            name=name, runnable=runnable, context_factory=factory, concurrency=concurrency
        )
        self._by_name[name] = registration
        if explicit or runnable not in self._by_class:
            self._by_class[runnable] = registration
        return registration

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


@dataclass(frozen=True, kw_only=True, slots=True)
class Declaration:
    """What :func:`register` marks on a class: the name and how to build its context."""

    name: str
    context_factory: ContextFactory | None = None
    includes: tuple[type[Runnable], ...] = ()
    concurrency: Concurrency | None = None


def _declarations(value: object) -> tuple[Declaration, ...]:
    """The declarations marked on ``value`` itself (a subclass does not inherit its parent's)."""
    if not isinstance(value, type):
        return ()
    declared = value.__dict__.get(_DECLARED, ())
    return tuple(declared) if isinstance(declared, tuple) else ()


@overload
def register(
    name: str,
    runnable: None = None,
    *,
    context_factory: ContextFactory | None = None,
    includes: Iterable[type[Runnable]] = (),
    concurrency: Concurrency | None = None,
) -> Callable[[R], R]: ...


@overload
def register(
    name: str,
    runnable: R,
    *,
    context_factory: ContextFactory | None = None,
    includes: Iterable[type[Runnable]] = (),
    concurrency: Concurrency | None = None,
) -> R: ...


def register(
    name: str,
    runnable: R | None = None,
    *,
    context_factory: ContextFactory | None = None,
    includes: Iterable[type[Runnable]] = (),
    concurrency: Concurrency | None = None,
) -> R | Callable[[R], R]:
    """Declare ``runnable`` reachable on Celery as ``name``; returns the class unchanged.

    ``register("name", Cls, context_factory=...)`` at module level, or
    ``@register("name", context_factory=...)`` on the class. This only marks the
    class: a worker's registry takes it when the module is listed in
    ``AGENTLOOP_IMPORTS`` (:meth:`RunnableRegistry.from_modules`). A class may
    be declared under several names. ``concurrency`` (a
    :class:`~agentloop.orchestration.fairness.rules.Concurrency`) keys and limits its runs.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("a runnable name must be a non-empty string")
    declaration = Declaration(
        name=name, context_factory=context_factory, includes=tuple(includes), concurrency=concurrency
    )

    def mark(cls: R) -> R:
        if not _is_runnable_class(cls):
            raise TypeError(f"{cls!r} is not a runnable class")
        _check_parts(cls, declaration.includes)
        setattr(cls, _DECLARED, (*_declarations(cls), declaration))
        return cls

    return mark if runnable is None else mark(runnable)


def declared_name(runnable: type) -> str:
    """The name ``runnable`` was first declared under with :func:`register`."""
    declarations = _declarations(runnable)
    if not declarations:
        raise UnknownRunnableError(derived_name(runnable), ())
    return declarations[0].name


def input_provider(name: str) -> Callable[[F], F]:
    """Declare the decorated function the input provider ``name`` of batches (see :func:`register`)."""
    if not isinstance(name, str) or not name:
        raise ValueError("an input provider needs a non-empty name")

    def mark(function: F) -> F:
        setattr(function, _PROVIDES, name)
        return function

    return mark

"""The tracer seam: spans of loop iterations and model calls, without a tracing library.

The core never imports OpenTelemetry. It opens spans through :func:`trace_span`,
which goes to the :class:`Tracer` of the enclosing :func:`use_tracer` block (the run
scope installs its ``tracer`` there, as it does its degradation sink) and does
nothing without one. The orchestration implements the seam on OpenTelemetry
(``orchestration/tracing/``), off unless an exporter is configured.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar, runtime_checkable

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.context_binding import Binding

T = TypeVar("T")


@runtime_checkable
class Span(Protocol):
    """An open span: attributes may be added until it ends."""

    def set_attribute(self, key: str, value: Any) -> None: ...


@runtime_checkable
class Tracer(Protocol):
    """Opens spans: ``span(name, attributes)`` is a context manager yielding the :class:`Span`,
    current for whatever runs inside it, ended (with an error status on an exception) after."""

    def span(self, name: str, attributes: Mapping[str, Any]) -> AbstractContextManager[Span]: ...


class _NoSpan:
    def set_attribute(self, key: str, value: Any) -> None:
        return None


_NO_SPAN = _NoSpan()
_tracer: ContextVar[Tracer | None] = ContextVar("agentloop_tracer", default=None)


def use_tracer(tracer: Tracer | None) -> Binding[Tracer | None]:
    """Spans opened inside the block go to ``tracer`` (``None``: nowhere)."""
    return Binding(_tracer, tracer)


def current_tracer() -> Tracer | None:
    """The tracer spans go to here, or ``None``."""
    return _tracer.get()


@contextmanager
def trace_span(name: str, **attributes: Any) -> Iterator[Span]:
    """A span named ``name`` with ``attributes`` (``None`` values left out) when a tracer is
    installed; otherwise a span that records nothing."""
    tracer = _tracer.get()
    if tracer is None:
        yield _NO_SPAN
        return
    with tracer.span(name, {k: v for k, v in attributes.items() if v is not None}) as span:
        yield span


async def traced(
    name: str, attributes: Mapping[str, Any], work: Callable[..., Awaitable[T] | T], /, **arguments: Any
) -> T:
    """``work(**arguments)`` (``def`` or ``async def``) inside the span ``name`` with ``attributes``."""
    if _tracer.get() is None:  # no tracer: no span to open (the engine calls this every iteration)
        return await maybe_await(work(**arguments))
    with trace_span(name, **attributes):
        return await maybe_await(work(**arguments))


def iteration_span(runnable: str, path: str, iteration: int) -> tuple[str, dict[str, Any]]:
    """The name and attributes of one loop iteration's span."""
    attributes = {"agentloop.runnable": runnable, "agentloop.path": path, "agentloop.iteration": iteration}
    return "agentloop.iteration", attributes

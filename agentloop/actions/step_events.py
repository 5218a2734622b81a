"""Step events: what a step reports to the run while it works, without knowing the run.

A step (an action, a processor it calls) reports an observation such as a cache
hit or a piece of streamed model output with :func:`report_step_event`. The
report goes to the :class:`StepEventSink` of the enclosing
:func:`use_step_events` block, with that block's workflow path; the run scope
(``loops/scope.py``) opens the block for every runnable inside it, and both
runners give the root scope a sink that turns each report into a ``progress``
event for ``on_progress`` (the caller's callback in-process, the task's
publisher on Celery, which also stores it with the run's events). Outside any
run a report goes nowhere.

Step events are observation: a failing sink never fails the step.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.context_binding import Binding

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class StepEvent:
    """One observation of a step: which ``action`` (or processor), what happened (``phase``,
    e.g. ``"cache_hit"`` or ``"delta"``), a short ``message`` and JSON ``data``, at workflow ``path``."""

    action: str
    phase: str
    message: str = ""
    data: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    path: str = ""


@runtime_checkable
class StepEventSink(Protocol):
    """Where a run's step events go; ``step_event`` may be ``def`` or ``async def``."""

    def step_event(self, event: StepEvent) -> Awaitable[None] | None: ...


_sink: ContextVar[tuple[StepEventSink, str] | None] = ContextVar("agentloop_step_events", default=None)


def use_step_events(
    sink: StepEventSink | None, *, path: str = ""
) -> Binding[tuple[StepEventSink, str] | None]:
    """Report the step events of steps inside the block to ``sink``, at workflow ``path``."""
    return Binding(_sink, None if sink is None else (sink, path))


def step_events_wanted() -> bool:
    """Whether a report made here reaches a sink (a step can skip building events nobody hears)."""
    return _sink.get() is not None


async def report_step_event(
    *, action: str, phase: str, message: str = "", data: Mapping[str, Any] | None = None
) -> None:
    """Tell the run's sink, if any, that ``action`` reached ``phase``; a failing sink is logged."""
    bound = _sink.get()
    if bound is None:
        return
    sink, path = bound
    event = StepEvent(action=action, phase=phase, message=message, data=data or {}, path=path)
    try:
        await maybe_await(sink.step_event(event))
    except Exception:
        logger.warning("step event sink failed for %s at %r", phase, path, exc_info=True)

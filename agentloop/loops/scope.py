"""The run scope: run id, workflow path, cancellation, deadline, checkpoints, degradations.

A runner opens a :class:`RunScope` for the run; pipelines and composites open
child scopes for their stages and branches. The scope travels in a
``ContextVar``, so asyncio tasks (concurrent branches) each see their own, and
every nested runnable sees the run's cancellation token and deadline without
anything being threaded through ``context``.

The scope's ``degradation`` sink hears the model failures the run's steps
survived (:mod:`agentloop.actions.degradation`): :func:`use_scope` installs it, with the
scope's path, for every step inside, so an action reports a failure without
knowing the scope (actions sit below loops).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar, runtime_checkable

from agentloop.actions.caching import StepCache, use_step_cache
from agentloop.actions.degradation import DegradationSink, use_degradation_sink
from agentloop.actions.errors import (
    AgentLoopError,
    RunCancelledError,
    RunDeadlineExceededError,
    RunStoppedError,
)
from agentloop.actions.human import HumanChannel, use_human_channel
from agentloop.actions.recording import RecordingTap, use_recording
from agentloop.actions.step_events import StepEventSink, use_step_events
from agentloop.actions.tracing import Tracer, use_tracer


@runtime_checkable
class CancelSignal(Protocol):
    """Anything that can say whether the run was asked to stop: a :class:`CancellationToken`
    in-process, the run store's cancel flag on Celery."""

    def is_cancelled(self) -> bool: ...


class CancellationToken:
    """An in-process cancellation token."""

    __slots__ = ("_cancelled", "reason")

    def __init__(self) -> None:
        self._cancelled = False
        self.reason = ""

    def cancel(self, reason: str = "cancelled") -> None:
        self._cancelled = True
        self.reason = reason

    def is_cancelled(self) -> bool:
        return self._cancelled


@runtime_checkable
class Checkpointer(Protocol):
    """Durable loops: where each finished iteration's state is kept.

    ``load`` returns ``(iteration, state)`` of the last finished iteration for
    the loop at ``path``, or ``None``; ``save`` records one. The loop saves an
    iteration before the next one starts, or on its way out when it fails or is
    stopped; the iteration after which it completes is not saved (its result is
    what a store records next). ``save`` may return an awaitable, which the loop awaits
    before it goes on (a checkpoint written together with other loops').
    """

    def load(self, *, path: str) -> tuple[int, Any] | None: ...

    def save(self, *, path: str, iteration: int, state: Any) -> Awaitable[None] | None: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class RunScope:
    """Where a runnable runs: its run id and path, and the run's deadline, cancellation,
    checkpointer and the sink its model failures are reported to."""

    run_id: str
    path: str = ""
    deadline: float | None = None  # time.monotonic() value
    cancel: CancelSignal | None = None
    checkpointer: Checkpointer | None = None
    degradation: DegradationSink | None = None
    #: Who answers the questions of the run's steps (``actions/human.py``).
    human: HumanChannel | None = None
    #: Where the spans of the run's iterations and model calls go (``actions/tracing.py``).
    tracer: Tracer | None = None
    #: Where the run's steps report cache hits, streamed output and the like (``actions/step_events.py``).
    events: StepEventSink | None = None
    #: Where the run's cached steps keep and find their results (``actions/caching.py``).
    cache: StepCache | None = None
    #: Where the run's recording goes, or a replay's recorded replies come from (``actions/recording.py``).
    recording: RecordingTap | None = None

    def child(self, segment: str) -> RunScope:
        """The scope of a nested runnable, e.g. ``pipeline/1`` or ``branch/a``."""
        return replace(self, path=f"{self.path}/{segment}" if self.path else segment)

    def remaining(self) -> float | None:
        """Seconds until the deadline, or ``None`` when there is none."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def check(self) -> None:
        """Raise when the run was cancelled or its deadline passed."""
        if self.cancel is not None and self.cancel.is_cancelled():
            raise RunCancelledError(f"run {self.run_id} was cancelled", path=self.path)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise RunDeadlineExceededError(f"run {self.run_id} passed its deadline", path=self.path)


T = TypeVar("T")


def monotonic_deadline(deadline: float | None) -> float | None:
    """This process's ``time.monotonic()`` value for the epoch time (``time.time()``) ``deadline``:
    how tasks in different processes hold one run's deadline, since monotonic clocks differ."""
    return None if deadline is None else time.monotonic() + (deadline - time.time())


async def within_deadline(scope: RunScope, work: Awaitable[T], *, limit: str = "") -> T:
    """Await ``work``, cut off when ``scope``'s deadline passes (a step hanging in a model call too)
    with :class:`~actions.RunDeadlineExceededError` ("run ... passed its deadline" + ``limit``)."""
    try:
        async with asyncio.timeout(scope.remaining()):
            return await work
    except TimeoutError:
        if scope.deadline is not None and time.monotonic() >= scope.deadline:
            message = f"run {scope.run_id} passed its deadline{limit}"
            raise RunDeadlineExceededError(message, path=scope.path) from None
        raise


def failure_phase(error: BaseException, scope: RunScope) -> str:
    """The phase of the ``failed`` event a runnable emits when ``error`` ends it.

    A task cancelled from outside (the runner's deadline, or a fail-fast sibling)
    reports why, as a stopped run does; any other error is ``"error"``.
    """
    if isinstance(error, RunStoppedError):
        return error.status
    status = getattr(error, "status", None)
    if isinstance(error, AgentLoopError) and isinstance(status, str):
        return status  # e.g. "budget_exceeded"
    if isinstance(error, asyncio.CancelledError):
        deadline_passed = scope.deadline is not None and time.monotonic() >= scope.deadline
        return RunDeadlineExceededError.status if deadline_passed else RunCancelledError.status
    return "error"


def new_run_id() -> str:
    """A fresh run id (32 hex digits)."""
    return uuid.uuid4().hex


_current: ContextVar[RunScope | None] = ContextVar("agentloop_run_scope", default=None)


def current_scope() -> RunScope | None:
    """The scope of the running runnable, or ``None`` outside any run."""
    return _current.get()


@contextmanager
def ensure_scope() -> Iterator[RunScope]:
    """The current scope, or a fresh root scope for a runnable run on its own."""
    scope = _current.get()
    if scope is not None:
        yield scope
        return
    with use_scope(RunScope(run_id=new_run_id())) as root:
        yield root


@contextmanager
def use_scope(scope: RunScope) -> Iterator[RunScope]:
    """Run the block inside ``scope`` (its steps report model failures to its ``degradation`` sink,
    their step events to its ``events`` sink, keep cached results in its ``cache``, and ask their
    questions through its ``human`` channel)."""
    token = _current.set(scope)
    try:
        with (
            use_degradation_sink(scope.degradation, path=scope.path),
            use_human_channel(scope.human, path=scope.path),
            use_tracer(scope.tracer),
            use_step_events(scope.events, path=scope.path),
            use_step_cache(scope.cache),
            use_recording(scope.recording, path=scope.path),
        ):
            yield scope
    finally:
        _current.reset(token)

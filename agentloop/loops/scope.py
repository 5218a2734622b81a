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
import functools
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar, runtime_checkable

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.caching import StepCache, use_step_cache
from agentloop.actions.context_binding import Binding
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


class Offload(Protocol):
    """Runs ``work`` (no arguments) somewhere other than the event loop's thread, with the caller's
    context variables, and gives an awaitable of its result (or its error)."""

    def __call__(self, work: Callable[[], T]) -> Awaitable[T]: ...


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
    #: How the run's plain-function work (a loop's ``advance_state``, a step's function) runs:
    #: ``None``, on the event loop's thread (in-process); a pack's worker threads on Celery, so a
    #: plain step that blocks does not hold up the branches beside it (:func:`call_work`).
    offload: Offload | None = None

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
    deadline = scope.deadline
    if deadline is None:  # nothing to cut off: no timeout to arm (a run without a deadline)
        return await work
    try:
        async with asyncio.timeout(None) as timeout:
            alarm = _DeadlineAlarm(deadline, timeout)
            try:
                return await work
            finally:
                alarm.cancel()
    except TimeoutError:
        if time.monotonic() >= deadline:
            message = f"run {scope.run_id} passed its deadline{limit}"
            raise RunDeadlineExceededError(message, path=scope.path) from None
        raise


class _DeadlineAlarm:
    """Expires ``timeout`` once ``time.monotonic()`` has reached ``deadline``, never before.

    An event loop's timer may wake early against ``time.monotonic()``: uvloop's clock is libuv's,
    in milliseconds and read once per turn of the loop, so a timer armed late in a long turn (a
    pack's hundreds of branches) fires up to that turn's length early. The work cut off then would
    read as cancelled, not as past its deadline (:func:`failure_phase`). The alarm checks the
    clock the deadline is in and waits out the rest when woken early."""

    __slots__ = ("_deadline", "_handle", "_loop", "_timeout")

    def __init__(self, deadline: float, timeout: asyncio.Timeout) -> None:
        self._loop = asyncio.get_running_loop()
        self._deadline, self._timeout = deadline, timeout
        self._handle: asyncio.TimerHandle | None = None
        self._ring()

    def _ring(self) -> None:
        left = self._deadline - time.monotonic()
        if left > 0:
            self._handle = self._loop.call_later(left, self._ring)
        else:  # passed: the timeout cancels the work at the loop's next turn
            self._handle = None
            self._timeout.reschedule(self._loop.time())

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


async def call_work(scope: RunScope | None, work: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``work(*args, **kwargs)``, awaited when awaitable, as ``scope`` runs a runnable's work (a
    loop's ``advance_state``, a step's function): an ``async def`` on the event loop; a plain
    function through the scope's ``offload`` when it has one (a pack's threads), else on the loop
    too."""
    if scope is None or scope.offload is None or inspect.iscoroutinefunction(work):
        return await maybe_await(work(*args, **kwargs))
    return await maybe_await(await scope.offload(functools.partial(work, *args, **kwargs)))


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


def use_scope(scope: RunScope) -> ScopeBlock:
    """Run the block inside ``scope`` (its steps report model failures to its ``degradation`` sink,
    their step events to its ``events`` sink, keep cached results in its ``cache``, and ask their
    questions through its ``human`` channel); ``with use_scope(scope) as inside`` gives ``scope``."""
    return ScopeBlock(scope)


class ScopeBlock:
    """:func:`use_scope`'s block: the scope and its sinks set on entry, put back on the way out
    (one object rather than seven generator-based blocks: the loop engine opens one per run)."""

    __slots__ = ("_bindings", "_scope", "_token")

    def __init__(self, scope: RunScope) -> None:
        self._scope = scope
        self._token: Token[RunScope | None] | None = None
        self._bindings: tuple[Binding[Any], ...] = ()

    def __enter__(self) -> RunScope:
        scope = self._scope
        self._token = _current.set(scope)
        bindings = (
            use_degradation_sink(scope.degradation, path=scope.path),
            use_human_channel(scope.human, path=scope.path),
            use_tracer(scope.tracer),
            use_step_events(scope.events, path=scope.path),
            use_step_cache(scope.cache),
            use_recording(scope.recording, path=scope.path),
        )
        for binding in bindings:
            binding.__enter__()
        self._bindings = bindings
        return scope

    def __exit__(self, *_: object) -> None:
        bindings, self._bindings = self._bindings, ()
        for binding in reversed(bindings):
            binding.__exit__(None, None, None)
        token, self._token = self._token, None
        if token is not None:
            _current.reset(token)

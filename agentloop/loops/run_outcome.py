"""How a run that returned a result ended: ``succeeded``, or ``degraded`` by model failures.

A step whose model call failed under the ``degrade`` policy (:mod:`agentloop.actions.degradation`)
lets the run go on; the run still returns its result, but ends ``degraded``. Both
runners say so the same way:

- each failure is a ``progress`` event at the failing step's path, phase
  ``model_unavailable``, ``data`` = ``{"action", "reason"}`` (from
  :class:`DegradationRecorder`, the sink both runners give the run scope);
- the run's last event is at the root path, phase ``degraded``, status
  ``completed``, ``data`` = ``{"status": "degraded", "failures": [...]}``
  (:func:`degraded_event`), the run's one terminal event: the root's own ``done`` before it
  is then a ``progress`` event (``loops/runner.py``, ``orchestration/store/seams.py``).

In-process, :meth:`~loops.InlineAgentRunner.request_outcome` returns a
:class:`RunOutcome` (``request`` returns just the result); on Celery the run
is recorded ``degraded`` with the failures as its error.

A loop that hit its ``max_iterations`` before it was complete also returns a
result, and says so (it is not an error, and does not change the status):

- the loop's last event (phase ``done``) has ``data`` = ``{"stopped_by": "bound"}``
  (``"complete"`` when it finished); these events are stored with the run, so on
  Celery the run's events in the run store are its record of it (no other
  column): :func:`bounded_paths` reads them back, and ``RunHandle.stopped_by``
  answers from them;
- in-process, the loop reports its path to the :class:`BoundRecorder` the runner
  installs, and :attr:`RunOutcome.stopped_by` is ``"bound"`` when any loop of the
  run stopped at its bound (:attr:`RunOutcome.bounded` lists their paths);
- inside the loop, ``build_result`` / ``build_bounded_result`` can read
  ``self.stopped_by`` (``"complete"`` or ``"bound"``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.degradation import INVALID_OUTPUT, UNAVAILABLE, ModelFailure
from agentloop.actions.step_events import StepEvent
from agentloop.actions.usage import CacheUsage
from agentloop.loops.contract import ProgressCallback
from agentloop.loops.progress import ProgressEvent, ProgressStatus

logger = logging.getLogger(__name__)

SUCCEEDED = "succeeded"
DEGRADED = "degraded"
#: The phase of the event reporting one model failure.
MODEL_UNAVAILABLE = "model_unavailable"
#: ``stopped_by`` of a loop that finished (``is_complete``), and of one that hit its bound first.
STOPPED_COMPLETE, STOPPED_BY_BOUND = "complete", "bound"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOutcome:
    """A run that returned: its ``result``, ``status`` (``succeeded`` / ``degraded``) and ``failures``."""

    result: Any
    failures: tuple[ModelFailure, ...] = ()
    #: The paths of the run's loops that stopped at their bound (``""`` is the run's root).
    bounded: tuple[str, ...] = ()
    #: The run's step-cache hits, misses and tokens saved (``actions/caching.py``).
    cache: CacheUsage = field(default_factory=CacheUsage)

    @property
    def stopped_by(self) -> str:
        """``"bound"`` when a loop of the run hit its ``max_iterations`` before it was complete,
        else ``"complete"``."""
        return STOPPED_BY_BOUND if self.bounded else STOPPED_COMPLETE

    @property
    def status(self) -> str:
        return DEGRADED if self.failures else SUCCEEDED

    @property
    def degraded(self) -> bool:
        return bool(self.failures)

    @property
    def error(self) -> dict[str, Any] | None:
        """What a degraded run records as its error (``None`` when it succeeded)."""
        return degradation_error(self.failures) if self.failures else None


def degradation_error(failures: Iterable[ModelFailure]) -> dict[str, Any]:
    """The error a degraded run records: ``{"type", "message", "failures"}``, named after its first
    failure: ``ModelUnavailable``, or ``InvalidModelOutput`` when the model answered wrongly."""
    failures = list(failures)
    first = failures[0]
    more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
    return {
        "type": "InvalidModelOutput" if first.kind == INVALID_OUTPUT else "ModelUnavailable",
        "message": f"{first.describe()}{more}",
        "failures": [failure.to_dict() for failure in failures],
    }


def model_failure_event(run_id: str, failure: ModelFailure) -> ProgressEvent:
    """The ``progress`` event reporting one failure, at the failing step's path."""
    return ProgressEvent(
        run_id=run_id,
        path=failure.path,
        runnable=failure.action,
        iteration=0,
        max_iterations=0,
        phase=MODEL_UNAVAILABLE,
        status=ProgressStatus.PROGRESS,
        message=failure.reason,
        data={
            "action": failure.action,
            "reason": failure.reason,
            **({"kind": failure.kind} if failure.kind != UNAVAILABLE else {}),
        },
    )


def step_progress_event(run_id: str, event: StepEvent) -> ProgressEvent:
    """The ``progress`` event of one step event: the step's path, its action as ``runnable``."""
    return ProgressEvent(
        run_id=run_id,
        path=event.path,
        runnable=event.action,
        iteration=0,
        max_iterations=0,
        phase=event.phase,
        status=ProgressStatus.PROGRESS,
        message=event.message,
        data=event.data,
    )


def degraded_event(
    run_id: str, runnable: str, failures: Iterable[ModelFailure], *, path: str = ""
) -> ProgressEvent:
    """The run's last event when it ended degraded, at the run's root ``path``."""
    listed = [failure.to_dict() for failure in failures]
    return ProgressEvent(
        run_id=run_id,
        path=path,
        runnable=runnable,
        iteration=len(listed),
        max_iterations=len(listed),
        phase=DEGRADED,
        status=ProgressStatus.COMPLETED,
        message=f"completed degraded: {len(listed)} model call(s) failed",
        data={"status": DEGRADED, "failures": listed},
    )


def failures_in(events: Iterable[Mapping[str, Any]]) -> tuple[ModelFailure, ...]:
    """The failures reported in a run's stored events, in order, each once."""
    found: dict[tuple[str, str, str], ModelFailure] = {}
    for event in events:
        if event.get("phase") == MODEL_UNAVAILABLE and event.get("status") == ProgressStatus.PROGRESS:
            data = event.get("data") or {}
            failure = ModelFailure(
                action=str(data.get("action", event.get("runnable", ""))),
                reason=str(data.get("reason", event.get("message", ""))),
                path=str(event.get("path", "")),
                kind=str(data.get("kind") or UNAVAILABLE),
            )
            found.setdefault((failure.path, failure.action, failure.reason), failure)
    return tuple(found.values())


class DegradationRecorder:
    """The run scope's sink: keeps each failure and reports it as a ``model_unavailable`` event
    to ``on_progress`` (the caller's callback in-process, the task's publisher on Celery).

    It is the scope's step-event sink too (:mod:`agentloop.actions.step_events`): each step event
    becomes a ``progress`` event at the step's path (:func:`step_progress_event`)."""

    def __init__(self, *, run_id: str, on_progress: ProgressCallback | None = None) -> None:
        self.run_id, self.on_progress = run_id, on_progress
        self._failures: list[ModelFailure] = []
        self._lock = threading.Lock()

    @property
    def failures(self) -> tuple[ModelFailure, ...]:
        with self._lock:
            return tuple(self._failures)

    async def degraded(self, failure: ModelFailure) -> None:
        with self._lock:
            self._failures.append(failure)
        await self.emit(model_failure_event(self.run_id, failure))

    async def step_event(self, event: StepEvent) -> None:
        await self.emit(step_progress_event(self.run_id, event))

    async def emit(self, event: ProgressEvent) -> None:
        """Hand ``event`` to ``on_progress``; progress is observation, so a failing callback is logged."""
        if self.on_progress is None:
            return
        try:
            await maybe_await(self.on_progress(event))
        except Exception:
            logger.warning(
                "progress callback failed for a %s event at %r", event.phase, event.path, exc_info=True
            )


def bounded_paths(events: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The paths of the loops whose ``done`` event says they stopped at their bound, in order."""
    found: dict[str, None] = {}
    for event in events:
        data = event.get("data") or {}
        if event.get("phase") == "done" and data.get("stopped_by") == STOPPED_BY_BOUND:
            found.setdefault(str(event.get("path", "")), None)
    return tuple(found)


class BoundRecorder:
    """The paths of a run's loops that stopped at their bound, reported with :func:`report_bound`
    inside :meth:`installed` (the inline runner installs one per run)."""

    def __init__(self) -> None:
        self._paths: list[str] = []
        self._lock = threading.Lock()

    @property
    def paths(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._paths)

    def add(self, path: str) -> None:
        with self._lock:
            if path not in self._paths:
                self._paths.append(path)

    @contextmanager
    def installed(self) -> Iterator[BoundRecorder]:
        """Loops inside the block (concurrent branches too) report their bound here."""
        token = _bounds.set(self)
        try:
            yield self
        finally:
            _bounds.reset(token)


_bounds: ContextVar[BoundRecorder | None] = ContextVar("agentloop_bound_recorder", default=None)


def report_bound(path: str) -> None:
    """A loop at ``path`` stopped at its bound: tell the run's :class:`BoundRecorder`, if any."""
    recorder = _bounds.get()
    if recorder is not None:
        recorder.add(path)

"""Running one registered workflow inline and on the parity worker, and what is compared."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from agentloop.actions import RunStoppedError
from agentloop.loops import InlineAgentRunner, ProgressEvent
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.errors import WorkflowFailedError
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.testing import ProgressRecorder

PARITY = RunnableRegistry.from_modules(["workflows.parity"])


@dataclass
class Outcome:
    """How a run ended: its result or error, how it was recorded, and its events per path."""

    result: Any
    error: tuple[str, str] | None
    transcript: dict[str, list[tuple[Any, ...]]]
    status: str = ""
    events: tuple[ProgressEvent, ...] = ()


def run_inline(name: str, input: Any, *, deadline: float | None = None) -> Outcome:
    """``name`` on the inline runner, with the context its registration builds from ``{}``."""
    registration = PARITY.get(name)
    recorder = ProgressRecorder()
    runner = InlineAgentRunner.create(runnable=registration.runnable, context=registration.build_context({}))
    limit = None if deadline is None else timedelta(seconds=deadline)
    try:
        ran = runner.request_outcome_sync(input=input, on_progress=recorder, deadline=limit)
        result, error, status = ran.result, None, ran.status
    except Exception as exc:  # the failure is part of what is compared
        result, error = None, (type(exc).__name__, str(exc))
        status = exc.status if isinstance(exc, RunStoppedError) else "failed"
    return Outcome(
        result=result,
        error=error,
        transcript=recorder.transcript(),
        status=status,
        events=tuple(recorder.events),
    )


def run_on_celery(rig: Any, name: str, input: Any, *, deadline: float | None = None) -> Outcome:
    """``name`` on the parity worker; its events read back from the run store."""
    runner = CeleryAgentRunner.create(runnable=name, app=rig.app, store=rig.store)
    handle = runner.request_sync(input=input, deadline=deadline)
    try:
        result, error = handle.wait_sync(timeout=60), None
    except WorkflowFailedError as exc:
        result, error = None, (exc.error_type, exc.message)
    except RunStoppedError as exc:
        result, error = None, (type(exc).__name__, str(exc))
    recorder = ProgressRecorder()
    for _, event in rig.store.events(handle.run_id):
        recorder(ProgressEvent.from_dict(event))
    return Outcome(
        result=result,
        error=error,
        transcript=recorder.transcript(),
        status=handle.status,
        events=tuple(recorder.events),
    )


def shape(outcome: Outcome) -> dict[str, tuple[tuple[str, str], tuple[str, str]]]:
    """Per path, the first and the last event's (phase, status): what a run cut short by time
    must agree on (how many iterations ran before the cut depends on the clock)."""
    return {path: (events[0][1:3], events[-1][1:3]) for path, events in outcome.transcript.items()}


def most_at_once(events: tuple[ProgressEvent, ...], prefix: str) -> int:
    """How many runnables under ``prefix`` (e.g. ``branch/``) ran at once, from their first and
    last events' times."""
    spans: dict[str, list[float]] = {}
    for event in events:
        if event.path.startswith(prefix) and event.path.count("/") == prefix.count("/"):
            spans.setdefault(event.path, []).append(event.at)
    edges = sorted(
        [(min(times), 1) for times in spans.values()] + [(max(times), -1) for times in spans.values()]
    )
    running = peak = 0
    for _, step in edges:  # at equal times an end (-1) sorts before a start (+1)
        running += step
        peak = max(peak, running)
    return peak

"""``InlineAgentRunner``: run any runnable in-process.

The runner opens the run scope (run id, cancellation token, deadline) that
every nested runnable sees, so cancellation and the deadline reach each stage
and branch. A deadline also bounds a step that hangs inside a model call: the
run ends with :class:`~actions.RunDeadlineExceededError`, never a hang.

A run whose steps survived model failures (:mod:`agentloop.actions.degradation`) still
returns its result, but ends ``degraded``: :meth:`InlineAgentRunner.request`
returns the result and ``on_progress`` hears each failure and, last, a
``degraded`` event (:mod:`agentloop.loops.run_outcome`); :meth:`InlineAgentRunner.request_outcome`
returns a :class:`~agentloop.loops.run_outcome.RunOutcome` with the status and the failures.

Cached steps (:mod:`agentloop.actions.caching`) keep their results in the runner's ``cache``:
one :class:`~agentloop.actions.caching.InMemoryStepCache` per runner unless one is given, so the
runs of one runner share it; ``RunOutcome.cache`` counts the run's hits and misses.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any, Self

from agentloop.actions.caching import InMemoryStepCache, StepCache
from agentloop.actions.human import CallbackChannel, QuestionCallback
from agentloop.actions.recording import RecordingTap
from agentloop.actions.usage import CacheUsage, InMemoryUsageMeter, UsageMeter, use_meter
from agentloop.loops.contract import ProgressCallback, Runnable
from agentloop.loops.progress import ProgressEvent, ProgressStatus
from agentloop.loops.run_outcome import (
    DEGRADED,
    BoundRecorder,
    DegradationRecorder,
    RunOutcome,
    degraded_event,
)
from agentloop.loops.scope import CancelSignal, Checkpointer, RunScope, new_run_id, use_scope, within_deadline


class InlineAgentRunner:
    """``InlineAgentRunner.create(runnable=Cls, context=ctx)``, then ``await request(input=...)``.

    ``cache`` is where cached steps keep their results (default: an
    :class:`~agentloop.actions.caching.InMemoryStepCache` of this runner's own).
    """

    def __init__(
        self, *, runnable: type[Runnable], context: Any = None, cache: StepCache | None = None
    ) -> None:
        self.runnable = runnable
        self.context = context
        self.cache: StepCache = InMemoryStepCache() if cache is None else cache

    @classmethod
    def create(cls, *, runnable: type[Runnable], context: Any = None, cache: StepCache | None = None) -> Self:
        return cls(runnable=runnable, context=context, cache=cache)

    async def request(
        self,
        *,
        input: Any,
        on_progress: ProgressCallback | None = None,
        run_id: str | None = None,
        cancel: CancelSignal | None = None,
        deadline: timedelta | None = None,
        checkpointer: Checkpointer | None = None,
        path: str = "",
        meter: UsageMeter | None = None,
        token_budget: int | None = None,
        on_question: QuestionCallback | None = None,
        cache: StepCache | None = None,
        recording: RecordingTap | None = None,
    ) -> Any:
        """Run once and return the result, also when the run ended ``degraded``.

        A degraded run is not a failure here: when model calls failed and the steps' fallbacks
        answered (``on_model_failure`` / ``on_invalid_output`` ``"degrade"``), the result holds
        those fallbacks, a warning is logged and the run's events say so (a ``model_unavailable``
        event per failure, a last ``degraded`` one), but nothing is raised and the result does not
        say it. Call :meth:`request_outcome` to tell: its ``status`` is ``"degraded"`` and its
        ``failures`` name each step and why (``stopped_by`` says whether a loop hit its bound).

        Raises :class:`~actions.RunCancelledError` when ``cancel`` fires and
        :class:`~actions.RunDeadlineExceededError` when ``deadline`` passes. Model
        usage is summed in ``meter`` (an :class:`~actions.InMemoryUsageMeter` with
        ``token_budget`` when none is given); a step that passes the budget ends
        with :class:`~actions.TokenBudgetExceededError`. A step's question
        (:func:`~agentloop.actions.human.ask_human`) goes to ``on_question``, which returns the answer
        or an awaitable of it; the step waits for it. Cached steps use ``cache`` (default: the
        runner's). With ``recording`` (an :class:`~agentloop.actions.recording.InMemoryRecording`,
        say) the run is recorded: its model turns, tool results, answers and cache hits.
        """
        outcome = await self.request_outcome(
            input=input,
            on_progress=on_progress,
            run_id=run_id,
            cancel=cancel,
            deadline=deadline,
            checkpointer=checkpointer,
            path=path,
            meter=meter,
            token_budget=token_budget,
            on_question=on_question,
            cache=cache,
            recording=recording,
        )
        return outcome.result

    async def request_outcome(
        self,
        *,
        input: Any,
        on_progress: ProgressCallback | None = None,
        run_id: str | None = None,
        cancel: CancelSignal | None = None,
        deadline: timedelta | None = None,
        checkpointer: Checkpointer | None = None,
        path: str = "",
        meter: UsageMeter | None = None,
        token_budget: int | None = None,
        on_question: QuestionCallback | None = None,
        cache: StepCache | None = None,
        recording: RecordingTap | None = None,
    ) -> RunOutcome:
        """The same as :meth:`request`, returning the result with how the run ended:
        ``outcome.status`` is ``"succeeded"`` or ``"degraded"``, ``outcome.failures`` the model
        failures the run's steps survived, ``outcome.stopped_by`` ``"bound"`` when a loop hit
        its ``max_iterations`` before it was complete (else ``"complete"``), ``outcome.cache`` the
        run's step-cache hits, misses and tokens saved (counted by the meter)."""
        if meter is None:
            meter = InMemoryUsageMeter(budget=token_budget)
        seconds = None if deadline is None else deadline.total_seconds()
        run_id = run_id or new_run_id()
        recorder = DegradationRecorder(run_id=run_id, on_progress=on_progress)
        scope = RunScope(
            run_id=run_id,
            path=path,
            deadline=None if seconds is None else time.monotonic() + seconds,
            cancel=cancel,
            checkpointer=checkpointer,
            degradation=recorder,
            events=None if on_progress is None else recorder,  # nobody listens: no step events built
            human=None if on_question is None else CallbackChannel(on_question),
            cache=self.cache if cache is None else cache,
            recording=recording,
        )
        instance = self.runnable.create(context=self.context)
        limit = "" if seconds is None else f" of {seconds:g}s"
        bounds = BoundRecorder()
        listener = None if on_progress is None else _one_end(on_progress, scope.path, recorder)
        with use_scope(scope), use_meter(meter), bounds.installed():
            result = await within_deadline(
                scope, instance.run(input=input, on_progress=listener), limit=limit
            )
        cache_use = getattr(meter, "cache", None)
        outcome = RunOutcome(
            result=result,
            failures=recorder.failures,
            bounded=bounds.paths,
            cache=cache_use if isinstance(cache_use, CacheUsage) else CacheUsage(),
        )
        if outcome.degraded:
            name = str(getattr(instance, "name", "") or type(instance).__name__)
            await recorder.emit(degraded_event(scope.run_id, name, outcome.failures, path=scope.path))
        return outcome

    def request_sync(self, *, input: Any, on_progress: ProgressCallback | None = None, **options: Any) -> Any:
        """The same as :meth:`request`, for code that has no event loop running: a ``degraded``
        run returns its fallbacks' result too, without raising (:meth:`request_outcome_sync` says
        whether it degraded)."""
        return asyncio.run(self.request(input=input, on_progress=on_progress, **options))

    def request_outcome_sync(
        self, *, input: Any, on_progress: ProgressCallback | None = None, **options: Any
    ) -> RunOutcome:
        """The same as :meth:`request_outcome`, for code that has no event loop running."""
        return asyncio.run(self.request_outcome(input=input, on_progress=on_progress, **options))


def _one_end(on_progress: ProgressCallback, root: str, recorder: DegradationRecorder) -> ProgressCallback:
    """``on_progress``, with one terminal event per run: once a model call failed (the run will
    end ``degraded``), the root's own ``completed`` event is a ``progress`` one, and the
    ``degraded`` event after it the run's end."""

    def listener(event: ProgressEvent) -> Any:
        if (
            event.path == root
            and event.status is ProgressStatus.COMPLETED
            and event.phase != DEGRADED
            and recorder.failures
        ):
            event = replace(event, status=ProgressStatus.PROGRESS)
        return on_progress(event)

    return listener

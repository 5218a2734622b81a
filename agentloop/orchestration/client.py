"""``CeleryAgentRunner``: the inline runner's call shape, on Celery.

``await runner.request(input=...)`` sends ``agentloop.launch`` and returns a
:class:`RunHandle` at once: its ``run_id`` (also the Celery task id whose
result is the workflow's), the latest progress and the stream of every
event of the run, ``wait`` for the result, and ``cancel`` (cooperative: every
stage and branch sees it at its next step).

The client speaks the wire contract only (``orchestration/wire.py``): given the
run store it reads events and cancels there; without one it asks the workers
through ``agentloop.progress`` and ``agentloop.cancel``.

A run that ended ``degraded`` (model calls failed, the run went on with
fallbacks) still returns its result from :meth:`RunHandle.wait`, as the inline
runner does; :attr:`RunHandle.status` says ``"degraded"`` and its recorded
error lists the failures (:attr:`RunHandle.error`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Self

from celery import Celery, states
from celery.backends.base import BaseKeyValueStoreBackend
from celery.result import AsyncResult

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.errors import (
    RunCancelledError,
    RunDeadlineExceededError,
    RunStoppedError,
)
from agentloop.loops.contract import ProgressCallback, Runnable
from agentloop.loops.progress import ProgressEvent
from agentloop.loops.run_outcome import STOPPED_BY_BOUND, STOPPED_COMPLETE, bounded_paths
from agentloop.loops.scope import new_run_id
from agentloop.orchestration.errors import WorkflowFailedError
from agentloop.orchestration.registry import declared_name
from agentloop.orchestration.wire import (
    CANCEL,
    LAUNCH,
    LAUNCH_SENT_STATE,
    PROGRESS,
    DegradedResult,
    LaunchRequest,
    progress_status,
)

if TYPE_CHECKING:
    from agentloop.orchestration.store import RunStore


_STOPPED: dict[str, type[RunStoppedError]] = {
    "RunCancelledError": RunCancelledError,
    "RunDeadlineExceededError": RunDeadlineExceededError,
}


def mark_launch_sent(app: Celery, run_id: str) -> None:
    """Mark ``run_id`` as sent in ``app``'s result backend, just before its launch is sent.

    ``agentloop.progress`` then answers ``pending`` rather than ``not_found``
    until a worker records the run (the wire contract, ``orchestration/wire.py``).
    An id that already has a state (a run relaunched under its id) keeps it.
    Only key-value result backends (Redis, memcached, ...) keep a state nobody's
    task wrote; with another backend (``rpc://``, none) nothing is written, and
    progress answers ``not_found`` until a worker records the run.
    """
    backend = app.backend
    if isinstance(backend, BaseKeyValueStoreBackend) and backend.get_state(run_id) == states.PENDING:
        backend.store_result(run_id, None, LAUNCH_SENT_STATE)


class RunHandle:
    """One run on Celery, followed by its run id."""

    def __init__(
        self,
        *,
        app: Celery,
        run_id: str,
        store: RunStore | None = None,
        on_progress: ProgressCallback | None = None,
        reply_timeout: float = 30.0,
    ) -> None:
        self.app, self.run_id, self.store, self.on_progress = app, run_id, store, on_progress
        self.reply_timeout = reply_timeout
        self._last_event_id = 0

    def _read(self, after_id: int) -> tuple[list[dict[str, Any]], int, Any]:
        """Events after ``after_id``, the id of the last of them, and the run's recorded error."""
        if self.store is not None:
            rows = self.store.events(self.run_id, after_id=after_id)
            record = self.store.get_run(self.run_id) if self.result.ready() else None
            error = record.error if record is not None else None
            return [event for _, event in rows], (rows[-1][0] if rows else after_id), error
        reply = self.app.send_task(PROGRESS, kwargs={"run_id": self.run_id, "after_id": after_id})
        answer = reply.get(timeout=self.reply_timeout)
        return list(answer["events"]), int(answer["last_id"]), answer.get("error")

    @property
    def id(self) -> str:
        return self.run_id

    @property
    def result(self) -> AsyncResult:
        return self.app.AsyncResult(self.run_id)

    @property
    def status(self) -> str:
        """The run's status: ``pending``, ``running``, ``succeeded``, ``degraded``, ``failed``, ...
        (from the run store, else from the workers through ``agentloop.progress``)."""
        return str(self._record("status"))

    @property
    def error(self) -> Any:
        """The run's recorded error (a degraded run's lists its model failures), or ``None``."""
        return self._record("error")

    @property
    def usage(self) -> dict[str, int] | None:
        """The run's usage so far: ``input_tokens``, ``output_tokens``, its step-cache
        ``cache_hits``, ``cache_misses`` and ``tokens_saved``, and its MCP ``tool_calls``; ``None``
        before a worker records it."""
        if self.store is None:
            usage = self._record("usage")
            return None if usage is None else {key: int(value) for key, value in usage.items()}
        record = self.store.get_run(self.run_id)
        if record is None:
            return None
        return record.usage()

    @property
    def stopped_by(self) -> str:
        """``"bound"`` when a loop of the run stopped at its ``max_iterations`` before it was
        complete, else ``"complete"`` (read from the run's events, as :attr:`bounded`)."""
        return STOPPED_BY_BOUND if self.bounded else STOPPED_COMPLETE

    @property
    def bounded(self) -> tuple[str, ...]:
        """The paths of the run's loops whose ``done`` event says they stopped at their bound."""
        events: list[dict[str, Any]] = []
        after = 0
        while True:
            page, last, _ = self._read(after)
            if not page or last <= after:
                return bounded_paths(events)
            events += page
            after = last

    def _record(self, field: str) -> Any:
        if self.store is not None:
            record = self.store.get_run(self.run_id)
            if record is not None:
                return getattr(record, field)
            return progress_status(None, self.result.state) if field == "status" else None
        reply = self.app.send_task(PROGRESS, kwargs={"run_id": self.run_id, "after_id": 0, "limit": 1})
        return reply.get(timeout=self.reply_timeout).get(field)

    def progress(self) -> ProgressEvent | None:
        """The latest event of the whole run, or ``None`` before the first."""
        events, _, _ = self._read(0)
        return ProgressEvent.from_dict(events[-1]) if events else None

    def new_events(self) -> list[ProgressEvent]:
        """Events recorded since the last call (the run's stream, in order)."""
        events, self._last_event_id, _ = self._read(self._last_event_id)
        return [ProgressEvent.from_dict(event) for event in events]

    def events(self, *, poll: float = 0.1, timeout: float | None = None) -> Iterator[ProgressEvent]:
        """Every event of the run as it happens, until the run ends."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            done = self.result.ready()
            yield from self.new_events()
            if done:
                return
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {self.run_id} still running after {timeout}s")
            time.sleep(poll)

    async def wait(
        self,
        *,
        timeout: timedelta | float | None = None,
        on_progress: ProgressCallback | None = None,
        poll: float = 0.1,
    ) -> Any:
        """The run's result; ``on_progress`` sees each event meanwhile.

        Raises :class:`~actions.RunCancelledError` / :class:`~actions.RunDeadlineExceededError`
        when the run stopped, :class:`WorkflowFailedError` when it failed, ``TimeoutError``
        when ``timeout`` passes first.
        """
        on_progress = on_progress or self.on_progress
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            done = await asyncio.to_thread(self.result.ready)
            for event in await asyncio.to_thread(self.new_events):
                if on_progress is not None:
                    await maybe_await(on_progress(event))
            if done:
                return self._outcome()
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {self.run_id} still running after {seconds}s")
            await asyncio.sleep(poll)

    def wait_sync(self, **options: Any) -> Any:
        return asyncio.run(self.wait(**options))

    def _outcome(self) -> Any:
        result = self.result
        if result.successful():
            degraded = DegradedResult.from_wire(result.result)
            return result.result if degraded is None else degraded.output
        _, _, recorded = self._read(self._last_event_id)
        error = recorded if isinstance(recorded, Mapping) else None
        if error is None:
            exc = result.result
            error = {"type": type(exc).__name__, "message": str(exc)}
        stopped = _STOPPED.get(str(error["type"]))
        if stopped is not None:
            raise stopped(str(error["message"]))
        raise WorkflowFailedError(str(error["type"]), str(error["message"]), run_id=self.run_id)

    def cancel(self) -> None:
        """Ask every task of the run to stop at its next step."""
        if self.store is not None:
            self.store.request_cancel(self.run_id)
        else:
            self.app.send_task(CANCEL, kwargs={"run_id": self.run_id}).get(timeout=self.reply_timeout)


class CeleryAgentRunner:
    """``CeleryAgentRunner.create(runnable="name" or Cls, context=spec, app=app)``.

    A class is launched under the name it was declared with
    (:func:`~agentloop.orchestration.registry.register`).
    With ``store``, handles read the run's events from the run store; without, from the workers.
    """

    def __init__(
        self,
        *,
        runnable: str | type[Runnable],
        context: Mapping[str, Any] | None = None,
        app: Celery,
        store: RunStore | None = None,
    ) -> None:
        self.name = runnable if isinstance(runnable, str) else declared_name(runnable)
        self.context = dict(context or {})
        self.app = app
        self.store = store

    @classmethod
    def create(
        cls,
        *,
        runnable: str | type[Runnable],
        context: Mapping[str, Any] | None = None,
        app: Celery,
        store: RunStore | None = None,
    ) -> Self:
        return cls(runnable=runnable, context=context, app=app, store=store)

    async def request(
        self,
        *,
        input: Any,
        on_progress: ProgressCallback | None = None,
        run_id: str | None = None,
        token_budget: int | None = None,
        deadline: timedelta | float | None = None,
        principal: str | None = None,
        record: bool = False,
        concurrency_key: str | None = None,
        priority: int | None = None,
    ) -> RunHandle:
        """Launch a run and return its handle at once; ``on_progress`` then receives the
        run's events while :meth:`RunHandle.wait` waits for the result.

        ``deadline`` (a ``timedelta`` or seconds) bounds the whole run, counted from when a
        worker starts it: every task of the run sees it, and the run ends with
        :class:`~actions.RunDeadlineExceededError`, recorded ``deadline_exceeded``.
        ``principal`` records who started it, for ``agentloop serve``'s ownership rule.
        ``record`` records the run (its model turns, tool results, answers and cache hits, in
        the run store) for ``agentloop replay`` and ``agentloop runs export``.
        ``concurrency_key`` is the key (a tenant) the run counts against for limits and fair
        shares, else its runnable's rule decides; ``priority`` (0 first, to 9) is the priority
        the launch and every task of the run are sent with (``docs/how-to/fairness.md``).
        """
        return await asyncio.to_thread(
            self.request_sync,
            input=input,
            on_progress=on_progress,
            run_id=run_id,
            token_budget=token_budget,
            deadline=deadline,
            principal=principal,
            record=record,
            concurrency_key=concurrency_key,
            priority=priority,
        )

    def request_sync(
        self,
        *,
        input: Any,
        on_progress: ProgressCallback | None = None,
        run_id: str | None = None,
        token_budget: int | None = None,
        deadline: timedelta | float | None = None,
        principal: str | None = None,
        record: bool = False,
        concurrency_key: str | None = None,
        priority: int | None = None,
    ) -> RunHandle:
        """The same as :meth:`request`, for code that has no event loop running."""
        request = LaunchRequest.parse(
            runnable=self.name,
            input=input,
            context=self.context,
            run_id=run_id or new_run_id(),
            token_budget=token_budget,
            deadline_seconds=deadline.total_seconds() if isinstance(deadline, timedelta) else deadline,
            principal=principal,
            record=record,
            concurrency_key=concurrency_key,
            priority=priority,
        )
        assert request.run_id is not None
        mark_launch_sent(self.app, request.run_id)
        self.app.send_task(LAUNCH, kwargs=request.to_kwargs(), task_id=request.run_id, priority=priority)
        return RunHandle(app=self.app, run_id=request.run_id, store=self.store, on_progress=on_progress)

"""``CeleryAgentRunner``: the inline runner's call shape, on Celery.

``await runner.request(input=...)`` sends ``agentloop.launch`` and returns a
:class:`RunHandle` at once: its ``run_id`` (also the Celery task id whose
result is the workflow's), the latest progress and the stream of every
event of the run (read from the run store), ``wait`` for the result, and
``cancel`` (cooperative: every stage and branch sees it at its next step).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any, Self

from celery import Celery
from celery.result import AsyncResult

from actions.context import maybe_await
from actions.errors import AgentLoopError, RunCancelledError, RunDeadlineExceededError, RunStoppedError
from loops.contract import ProgressCallback, Runnable
from loops.progress import ProgressEvent
from loops.scope import new_run_id
from orchestration.celery_adapter.tasks import LAUNCH
from orchestration.registry import RunnableRegistry, registry
from orchestration.store import RunStore
from orchestration.store.seams import get_run_store


class WorkflowFailedError(AgentLoopError):
    """A run on Celery failed; ``error_type`` and ``message`` are what the failing step raised."""

    def __init__(self, error_type: str, message: str, *, run_id: str) -> None:
        self.error_type, self.message, self.run_id = error_type, message, run_id
        super().__init__(f"{error_type}: {message}")


_STOPPED: dict[str, type[RunStoppedError]] = {
    "RunCancelledError": RunCancelledError,
    "RunDeadlineExceededError": RunDeadlineExceededError,
}


class RunHandle:
    """One run on Celery, followed by its run id."""

    def __init__(
        self, *, app: Celery, run_id: str, store: RunStore, on_progress: ProgressCallback | None = None
    ) -> None:
        self.app, self.run_id, self.store, self.on_progress = app, run_id, store, on_progress
        self._last_event_id = 0

    @property
    def id(self) -> str:
        return self.run_id

    @property
    def result(self) -> AsyncResult:
        return self.app.AsyncResult(self.run_id)

    def progress(self) -> ProgressEvent | None:
        """The latest event of the whole run, or ``None`` before the first."""
        events = self.store.events(self.run_id)
        return ProgressEvent.from_dict(events[-1][1]) if events else None

    def new_events(self) -> list[ProgressEvent]:
        """Events recorded since the last call (the run's stream, in order)."""
        rows = self.store.events(self.run_id, after_id=self._last_event_id)
        if rows:
            self._last_event_id = rows[-1][0]
        return [ProgressEvent.from_dict(event) for _, event in rows]

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
            return result.result
        record = self.store.get_run(self.run_id)
        error = record.error if record is not None and isinstance(record.error, Mapping) else None
        if error is None:
            exc = result.result
            error = {"type": type(exc).__name__, "message": str(exc)}
        stopped = _STOPPED.get(str(error["type"]))
        if stopped is not None:
            raise stopped(str(error["message"]))
        raise WorkflowFailedError(str(error["type"]), str(error["message"]), run_id=self.run_id)

    def cancel(self) -> None:
        """Ask every task of the run to stop at its next step."""
        self.store.request_cancel(self.run_id)


class CeleryAgentRunner:
    """``CeleryAgentRunner.create(runnable="name" or Cls, context=spec, app=app)``."""

    def __init__(
        self,
        *,
        runnable: str | type[Runnable],
        context: Mapping[str, Any] | None = None,
        app: Celery,
        store: RunStore | None = None,
        names: RunnableRegistry = registry,
    ) -> None:
        self.name = runnable if isinstance(runnable, str) else names.name_of(runnable)
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
    ) -> RunHandle:
        """Launch a run and return its handle at once; ``on_progress`` then receives the
        run's events while :meth:`RunHandle.wait` waits for the result."""
        return await asyncio.to_thread(
            self.request_sync, input=input, on_progress=on_progress, run_id=run_id, token_budget=token_budget
        )

    def request_sync(
        self,
        *,
        input: Any,
        on_progress: ProgressCallback | None = None,
        run_id: str | None = None,
        token_budget: int | None = None,
    ) -> RunHandle:
        run_id = run_id or new_run_id()
        kwargs = {"runnable": self.name, "input": input, "context": self.context, "run_id": run_id}
        if token_budget is not None:
            kwargs["token_budget"] = token_budget
        self.app.send_task(LAUNCH, kwargs=kwargs, task_id=run_id)
        return RunHandle(
            app=self.app, run_id=run_id, store=self.store or get_run_store(), on_progress=on_progress
        )

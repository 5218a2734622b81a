"""``InlineAgentRunner``: run any runnable in-process.

The runner opens the run scope (run id, cancellation token, deadline) that
every nested runnable sees, so cancellation and the deadline reach each stage
and branch. A deadline also bounds a step that hangs inside a model call: the
run ends with :class:`~actions.RunDeadlineExceededError`, never a hang.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any, Self

from actions.errors import RunDeadlineExceededError
from actions.usage import InMemoryUsageMeter, UsageMeter, use_meter
from loops.contract import ProgressCallback, Runnable
from loops.scope import CancelSignal, Checkpointer, RunScope, new_run_id, use_scope


class InlineAgentRunner:
    """``InlineAgentRunner.create(runnable=Cls, context=ctx)``, then ``await request(input=...)``."""

    def __init__(self, *, runnable: type[Runnable], context: Any = None) -> None:
        self.runnable = runnable
        self.context = context

    @classmethod
    def create(cls, *, runnable: type[Runnable], context: Any = None) -> Self:
        return cls(runnable=runnable, context=context)

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
    ) -> Any:
        """Run once and return the result.

        Raises :class:`~actions.RunCancelledError` when ``cancel`` fires and
        :class:`~actions.RunDeadlineExceededError` when ``deadline`` passes. Model
        usage is summed in ``meter`` (an :class:`~actions.InMemoryUsageMeter` with
        ``token_budget`` when none is given); a step that passes the budget ends
        with :class:`~actions.TokenBudgetExceededError`.
        """
        if meter is None:
            meter = InMemoryUsageMeter(budget=token_budget)
        seconds = None if deadline is None else deadline.total_seconds()
        scope = RunScope(
            run_id=run_id or new_run_id(),
            path=path,
            deadline=None if seconds is None else time.monotonic() + seconds,
            cancel=cancel,
            checkpointer=checkpointer,
        )
        instance = self.runnable.create(context=self.context)
        with use_scope(scope), use_meter(meter):
            try:
                async with asyncio.timeout(seconds):
                    return await instance.run(input=input, on_progress=on_progress)
            except TimeoutError:
                if scope.deadline is not None and time.monotonic() >= scope.deadline:
                    raise RunDeadlineExceededError(
                        f"run {scope.run_id} passed its deadline of {seconds:g}s", path=scope.path
                    ) from None
                raise

    def request_sync(self, *, input: Any, on_progress: ProgressCallback | None = None, **options: Any) -> Any:
        """The same as :meth:`request`, for code that has no event loop running."""
        return asyncio.run(self.request(input=input, on_progress=on_progress, **options))

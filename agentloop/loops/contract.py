"""The runnable contract every composable unit satisfies.

::

    Cls.create(*, context) -> instance
    await instance.run(*, input, on_progress=None) -> result

:class:`RunnableBase` gives loops, pipelines, composites and action stages the
factory, the ``context`` slot and one way to emit progress.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

from agentloop.actions.awaiting import maybe_await
from agentloop.loops.progress import ProgressEvent, ProgressStatus
from agentloop.loops.scope import RunScope

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[ProgressEvent], Awaitable[None] | None]
"""What ``on_progress`` accepts: called with each :class:`ProgressEvent`; ``def`` or ``async def``."""


@runtime_checkable
class Runnable(Protocol):
    """What a runner, a pipeline stage or a composite branch can run."""

    @classmethod
    def create(cls, *, context: Any = None) -> Self: ...

    async def run(self, *, input: Any, on_progress: ProgressCallback | None = None) -> Any: ...


class RunnableBase:
    """Factory, ``context`` slot and progress emission shared by all runnables."""

    #: The name used in progress events; the class name unless set.
    runnable_name: ClassVar[str] = ""

    def __init__(self, *, context: Any = None) -> None:
        self.context = context

    @classmethod
    def create(cls, *, context: Any = None) -> Self:
        return cls(context=context)

    @property
    def name(self) -> str:
        return self.runnable_name or type(self).__name__

    def make_event(
        self,
        *,
        scope: RunScope,
        iteration: int,
        max_iterations: int,
        phase: str,
        status: ProgressStatus,
        message: str = "",
        data: dict[str, Any] | None = None,
    ) -> ProgressEvent:
        return ProgressEvent(
            run_id=scope.run_id,
            path=scope.path,
            runnable=self.name,
            iteration=iteration,
            max_iterations=max_iterations,
            phase=phase,
            status=status,
            message=message,
            data=data or {},
        )

    async def emit_progress(self, *, event: ProgressEvent, on_progress: ProgressCallback | None) -> None:
        """Deliver ``event``. Progress is observation: a failing callback never fails the run."""
        if on_progress is None:
            return
        try:
            await maybe_await(on_progress(event))
        except Exception:
            logger.warning("progress callback failed for %s at %s", event.runnable, event.path, exc_info=True)

"""``BaseAgentLoop``: the iteration engine.

Per iteration, in this order (DESIGN §5):

1. ``is_complete`` -> return ``build_result``;
2. iteration at ``max_iterations`` -> return ``build_bounded_result`` (the
   safety bound; by default the same as ``build_result``, which can tell the
   two apart by ``self.stopped_by``: ``"complete"`` or ``"bound"``);
3. ``should_compress`` -> ``compress_state`` (and a ``compress`` progress event);
4. ``advance_state`` returns the NEXT state;
5. one progress event from ``build_progress_event``;
6. next iteration.

The engine is a plain ``while`` loop: no recursion, so any bound works. Before
each iteration it checks the run scope for cancellation and the deadline; a
loop whose task is cancelled from outside (the deadline, a fail-fast sibling)
still ends its progress with a ``failed`` event saying why.
When the scope carries a checkpointer, every finished iteration's state is
saved before the next iteration starts, and a redelivered loop resumes from the
last one. A loop that completes (or stops at its bound) right after an
iteration writes no checkpoint for it: its result, recorded next, supersedes
it; a loop that fails or is stopped still saves it on the way out.

A loop may declare its state as a pydantic model, ``state_type``: every hook then
receives an instance (a state a hook returns as a dict is validated into one),
checkpoints keep its JSON (``dump_state``) and a resumed loop gets the instance
back (``load_state``); a state that does not validate is a clear
:class:`~actions.StateNotSerializableError`. Without it, state is JSON data.

A loop that stops at its bound says so: its last event (phase ``done``) carries
``data["stopped_by"] == "bound"`` (``"complete"`` otherwise), a warning is
logged, and the runner's :class:`~agentloop.loops.run_outcome.BoundRecorder` hears its path
(:attr:`~loops.RunOutcome.stopped_by`; on Celery ``RunHandle.stopped_by``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.degradation import describe_path
from agentloop.actions.errors import RunStoppedError, StateNotSerializableError
from agentloop.actions.recording import recording_iteration
from agentloop.actions.registry import AgentActionRegistry
from agentloop.actions.schema import validation_problems
from agentloop.actions.tracing import iteration_span, traced
from agentloop.loops.contract import ProgressCallback, RunnableBase
from agentloop.loops.progress import ProgressEvent, ProgressStatus
from agentloop.loops.run_outcome import STOPPED_BY_BOUND, STOPPED_COMPLETE, report_bound
from agentloop.loops.scope import RunScope, call_work, current_scope, ensure_scope, failure_phase

logger = logging.getLogger(__name__)


class BaseAgentLoop(RunnableBase, ABC):
    """Subclass and implement the four abstract hooks; override anything else."""

    #: The safety bound: the engine never runs more iterations than this.
    max_iterations: int = 10
    #: How the run ended, readable in ``build_result`` / ``build_bounded_result``:
    #: ``"complete"`` or ``"bound"`` (``None`` until the loop stops).
    stopped_by: str | None = None
    #: The state's pydantic model; ``None``: the state is plain JSON data.
    state_type: ClassVar[type[BaseModel] | None] = None

    @property
    def registry(self) -> AgentActionRegistry:
        """The actions :meth:`perform_action` may call. Empty by default."""
        return AgentActionRegistry()

    @abstractmethod
    def create_initial_state(self, *, input: Any) -> Any:
        """The state before the first iteration."""

    @abstractmethod
    def advance_state(self, *, state: Any, iteration: int) -> Any:
        """Do one iteration; return the NEXT state (never mutate ``state``)."""

    @abstractmethod
    def is_complete(self, *, state: Any, iteration: int) -> bool:
        """Whether the loop is done."""

    @abstractmethod
    def build_result(self, *, state: Any) -> Any:
        """The run's result from the final state."""

    def build_bounded_result(self, *, state: Any) -> Any:
        """The result when the bound was hit before completion."""
        return self.build_result(state=state)

    def dump_state(self, *, state: Any) -> Any:
        """The JSON data a checkpoint keeps of ``state``: its ``model_dump(mode="json")`` when the
        loop declares a ``state_type``, the state itself otherwise."""
        return state.model_dump(mode="json") if self.state_type is not None else state

    def load_state(self, *, data: Any) -> Any:
        """The state a checkpoint's JSON ``data`` stands for: an instance of ``state_type``."""
        return self._typed(data, made_by="a checkpoint")

    def _typed(self, state: Any, *, made_by: str) -> Any:
        """``state`` as an instance of ``state_type`` (validated when it is not one yet)."""
        state_type = self.state_type
        if state_type is None or isinstance(state, state_type):
            return state
        try:
            return state_type.model_validate(state)
        except ValidationError as error:
            problems = validation_problems(error.errors())
            message = (
                f"{self.name}: the state from {made_by} is not a valid {state_type.__name__}: {problems}"
            )
            raise StateNotSerializableError(message) from None

    def should_compress(self, *, state: Any, iteration: int) -> bool:
        return False

    def compress_state(self, *, state: Any, iteration: int) -> Any:
        return state

    def build_progress_event(self, *, state: Any, iteration: int) -> ProgressEvent:
        """The event after an iteration; ``iteration`` counts finished iterations."""
        return self.make_event(
            scope=self._scope,
            iteration=iteration,
            max_iterations=self.max_iterations,
            phase="iteration",
            status=ProgressStatus.PROGRESS,
            message=f"iteration {iteration} of at most {self.max_iterations}",
        )

    async def perform_action(self, *, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """Look ``name`` up in :attr:`registry` and run it (``context`` defaults to the loop's)."""
        action = self.registry.get(name)
        return await action.run(arguments=arguments, context=self.context if context is None else context)

    @property
    def _scope(self) -> RunScope:
        scope: RunScope | None = getattr(self, "_run_scope", None)
        if scope is None:
            raise RuntimeError("the run scope exists only while the loop runs")
        return scope

    async def _emit(
        self,
        on_progress: ProgressCallback | None,
        *,
        iteration: int,
        phase: str,
        status: ProgressStatus,
        message: str = "",
        data: dict[str, Any] | None = None,
    ) -> None:
        event = self.make_event(
            scope=self._scope,
            iteration=iteration,
            max_iterations=self.max_iterations,
            phase=phase,
            status=status,
            message=message,
            data=data,
        )
        await self.emit_progress(event=event, on_progress=on_progress)

    async def _checkpoint(self, scope: RunScope, finished: tuple[int, Any]) -> None:
        assert scope.checkpointer is not None
        iteration, state = finished
        await maybe_await(
            scope.checkpointer.save(path=scope.path, iteration=iteration, state=self.dump_state(state=state))
        )

    async def _checkpoint_on_the_way_out(self, scope: RunScope, finished: tuple[int, Any] | None) -> None:
        """Save the last finished iteration of a loop that is failing or stopped, so that a task
        tried again resumes after it; a checkpoint that cannot be written then (the store is
        what failed, say) must not hide the loop's own error."""
        if finished is None:
            return
        try:
            await self._checkpoint(scope, finished)
        except Exception:
            logger.warning(
                "loop at %r: could not checkpoint iteration %d", scope.path, finished[0], exc_info=True
            )

    async def run(self, *, input: Any, on_progress: ProgressCallback | None = None) -> Any:
        scope = current_scope()
        if scope is None:  # run on its own: a root scope of its own
            with ensure_scope() as scope:
                return await self._run_in(scope, input, on_progress)
        return await self._run_in(scope, input, on_progress)

    async def _run_in(self, scope: RunScope, input: Any, on_progress: ProgressCallback | None) -> Any:
        self._run_scope = scope
        self.stopped_by = None
        return await self._iterate(scope=scope, input=input, on_progress=on_progress)

    async def _iterate(self, *, scope: RunScope, input: Any, on_progress: ProgressCallback | None) -> Any:
        bound = self.max_iterations
        iteration, state = await self._start(scope=scope, input=input, on_progress=on_progress)
        pending: tuple[int, Any] | None = None  # the finished iteration not checkpointed yet
        try:
            while True:
                scope.check()
                if await maybe_await(self.is_complete(state=state, iteration=iteration)):
                    self.stopped_by = STOPPED_COMPLETE
                    result = await maybe_await(self.build_result(state=state))
                    break
                if iteration >= bound:
                    self.stopped_by = STOPPED_BY_BOUND
                    result = await maybe_await(self.build_bounded_result(state=state))
                    break
                if pending is not None:  # before any more work, as durable as saving right away
                    await self._checkpoint(scope, pending)
                    pending = None
                if await maybe_await(self.should_compress(state=state, iteration=iteration)):
                    compressed = await maybe_await(self.compress_state(state=state, iteration=iteration))
                    state = self._typed(compressed, made_by="compress_state")
                    await self._emit(
                        on_progress,
                        iteration=iteration,
                        phase="compress",
                        status=ProgressStatus.PROGRESS,
                        message="compressed the working context",
                    )
                span = iteration_span(self.name, scope.path, iteration)
                with recording_iteration(iteration):  # a recorded run places its entries by iteration
                    work = functools.partial(call_work, scope, self.advance_state)  # off the loop in a pack
                    advanced = await traced(*span, work, state=state, iteration=iteration)
                state = self._typed(advanced, made_by="advance_state")
                iteration += 1
                if scope.checkpointer is not None:
                    pending = (iteration, state)
                event = await maybe_await(self.build_progress_event(state=state, iteration=iteration))
                await self.emit_progress(event=event, on_progress=on_progress)
        except (Exception, asyncio.CancelledError) as error:  # a failure, a stop, a cancellation from outside
            await self._checkpoint_on_the_way_out(scope, pending)
            phase, message = self._failure(error, scope)
            await self._emit(
                on_progress, iteration=iteration, phase=phase, status=ProgressStatus.FAILED, message=message
            )
            raise
        bounded = self.stopped_by == STOPPED_BY_BOUND
        if bounded:
            logger.warning(
                "loop %s at %s stopped at its bound of %d iterations",
                self.name,
                describe_path(scope.path),
                bound,
            )
            report_bound(scope.path)
        await self._emit(
            on_progress,
            iteration=iteration,
            phase="done",
            status=ProgressStatus.COMPLETED,
            message="hit the iteration bound" if bounded else "complete",
            data={"stopped_by": self.stopped_by},
        )
        return result

    async def _start(
        self, *, scope: RunScope, input: Any, on_progress: ProgressCallback | None
    ) -> tuple[int, Any]:
        """The iteration and state the loop starts from: its last checkpoint, or a new state."""
        checkpoint = scope.checkpointer.load(path=scope.path) if scope.checkpointer else None
        if checkpoint is None:
            initial = await maybe_await(self.create_initial_state(input=input))
            state = self._typed(initial, made_by="create_initial_state")
            await self._emit(on_progress, iteration=0, phase="start", status=ProgressStatus.STARTED)
            return 0, state
        iteration, state = checkpoint[0], self.load_state(data=checkpoint[1])
        await self._emit(
            on_progress,
            iteration=iteration,
            phase="resume",
            status=ProgressStatus.STARTED,
            message=f"resumed after iteration {iteration}",
            data={"resumed_from": iteration},
        )
        return iteration, state

    @staticmethod
    def _failure(error: BaseException, scope: RunScope) -> tuple[str, str]:
        """The phase and message of the ``failed`` event a loop ends with when ``error`` stops it:
        the run stopped (cancel, deadline, budget), a step failed, or the task was cancelled from
        outside (the deadline passed, or a sibling branch failed)."""
        if isinstance(error, RunStoppedError):
            return error.status, str(error)
        phase = failure_phase(error, scope)
        if isinstance(error, asyncio.CancelledError):
            passed = phase == "deadline_exceeded"
            return phase, "the run passed its deadline" if passed else "the run was cancelled"
        return phase, f"{type(error).__name__}: {error}"

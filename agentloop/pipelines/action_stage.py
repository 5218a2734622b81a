"""``BaseActionStage``: one action as a runnable stage or branch; :func:`step`: a plain function as one.

A code step needs no second class: decorate a function (``def`` or ``async
def``) with :func:`step` and it *is* a stage class, usable as a pipeline stage,
a composite branch, or registered and run on Celery::

    @step
    async def summarize(answers: list[dict], context: Any) -> dict: ...

    class Report(BaseAgentPipeline):
        stages = (Collect, summarize)

The function receives the stage's input (and the context, when it has a
``context`` parameter). The class gets the function's module and qualified
name, so its derived name (``module.summarize``) is the same in every process.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar, overload

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.base import BaseAgentAction
from agentloop.actions.schema import json_output
from agentloop.loops.contract import ProgressCallback, RunnableBase
from agentloop.loops.progress import ProgressStatus
from agentloop.loops.scope import call_work, current_scope, ensure_scope, failure_phase


class BaseActionStage(RunnableBase):
    """Set ``action`` (an action class); the stage input becomes its arguments."""

    action: ClassVar[type[BaseAgentAction]]

    def build_action(self) -> BaseAgentAction:
        return self.action.create()

    def build_arguments(self, *, input: Any) -> dict[str, Any]:
        """The action's arguments: the input itself when it is an object, else ``{"input": input}``."""
        return dict(input) if isinstance(input, dict) else {"input": input}

    def build_result(self, *, value: Any, input: Any) -> Any:
        """The stage's result: the action's value, as JSON data when it is a pydantic model or a
        dataclass instance (a stage's result may cross to another task, on Celery)."""
        return json_output(value)

    async def run(self, *, input: Any, on_progress: ProgressCallback | None = None) -> Any:
        with ensure_scope() as scope:
            scope.check()
            action = self.build_action()

            async def emit(status: ProgressStatus, phase: str, done: int, message: str = "") -> None:
                event = self.make_event(
                    scope=scope,
                    iteration=done,
                    max_iterations=1,
                    phase=phase,
                    status=status,
                    message=message or f"action {action.name}",
                )
                await self.emit_progress(event=event, on_progress=on_progress)

            await emit(ProgressStatus.STARTED, "start", 0)
            try:
                arguments = await maybe_await(self.build_arguments(input=input))
                value = await action.run(arguments=arguments, context=self.context)
                result = await maybe_await(self.build_result(value=value, input=input))
            except BaseException as error:
                await emit(
                    ProgressStatus.FAILED,
                    failure_phase(error, scope),
                    0,
                    f"{type(error).__name__}: {error}",
                )
                raise
            await emit(ProgressStatus.COMPLETED, "done", 1)
            return result


#: Where :func:`step` keeps a function's stage class, so the same function is always the same stage.
_STAGE_ATTRIBUTE = "__agentloop_stage__"


class FunctionAction(BaseAgentAction):
    """The action of a :func:`step` stage: calls :attr:`function` with the stage's input."""

    function: ClassVar[Callable[..., Any]]
    takes_context: ClassVar[bool] = False

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        function = type(self).function
        if self.takes_context:  # off the event loop when the run's scope says so (a pack's threads)
            return await call_work(current_scope(), function, arguments["input"], context=context)
        return await call_work(current_scope(), function, arguments["input"])


class FunctionStage(BaseActionStage):
    """A :func:`step` stage: its input goes to the function as it is."""

    action: ClassVar[type[BaseAgentAction]] = FunctionAction
    #: The function the stage runs.
    function: ClassVar[Callable[..., Any]]

    def build_arguments(self, *, input: Any) -> dict[str, Any]:
        return {"input": input}


def _takes_context(function: Callable[..., Any]) -> bool:
    try:
        return "context" in inspect.signature(function).parameters
    except (TypeError, ValueError):  # no signature to read: pass the input only
        return False


@overload
def step(function: Callable[..., Any], /) -> type[FunctionStage]: ...


@overload
def step(
    *,
    name: str | None = None,
    cache_ttl: timedelta | float | None = None,
    cache_version: str = "",
) -> Callable[[Callable[..., Any]], type[FunctionStage]]: ...


def step(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    cache_ttl: timedelta | float | None = None,
    cache_version: str = "",
) -> type[FunctionStage] | Callable[[Callable[..., Any]], type[FunctionStage]]:
    """The stage class that runs ``function`` (see the module doc): ``@step``, ``@step(name=...)``
    or ``Stage = step(function)``. ``name`` (default the function's name) names the step in
    progress events. The same function always gives the same class.

    ``cache_ttl`` opts the step into the run's step cache (:mod:`agentloop.actions.caching`): its result is
    kept under a hash of its name, its input and ``cache_version`` (change that when the
    function's meaning changes) and reused for ``cache_ttl`` seconds."""

    def make(function: Callable[..., Any]) -> type[FunctionStage]:
        existing = getattr(function, _STAGE_ATTRIBUTE, None)
        if isinstance(existing, type) and issubclass(existing, FunctionStage):
            return existing
        if not callable(function):
            raise TypeError(f"step() takes a function, not {function!r}")
        step_name = str(name or getattr(function, "__name__", None) or "step")
        qualname = getattr(function, "__qualname__", step_name)
        module = getattr(function, "__module__", __name__)
        action = type(
            f"{step_name}_action",
            (FunctionAction,),
            {
                "name": step_name,
                "description": inspect.getdoc(function) or f"the step {step_name}",
                "function": staticmethod(function),
                "takes_context": _takes_context(function),
                "cache_ttl": cache_ttl,
                "cache_version": cache_version,
                "__module__": module,
                "__qualname__": f"{qualname}.action",
            },
        )
        stage = type(
            step_name,
            (FunctionStage,),
            {
                "action": action,
                "runnable_name": step_name,
                "function": staticmethod(function),
                "__doc__": inspect.getdoc(function) or f"The step {step_name}.",
                "__module__": module,
                "__qualname__": qualname,
            },
        )
        with contextlib.suppress(AttributeError, TypeError):  # a callable that takes no attributes
            setattr(function, _STAGE_ATTRIBUTE, stage)
        return stage

    return make if function is None else make(function)

"""``BaseActionStage``: one action as a runnable stage or branch."""

from __future__ import annotations

from typing import Any, ClassVar

from actions.base import BaseAgentAction
from actions.context import maybe_await
from loops.contract import ProgressCallback, RunnableBase
from loops.progress import ProgressStatus
from loops.scope import ensure_scope, failure_phase


class BaseActionStage(RunnableBase):
    """Set ``action`` (an action class); the stage input becomes its arguments."""

    action: ClassVar[type[BaseAgentAction]]

    def build_action(self) -> BaseAgentAction:
        return self.action.create()

    def build_arguments(self, *, input: Any) -> dict[str, Any]:
        """The action's arguments: the input itself when it is an object, else ``{"input": input}``."""
        return dict(input) if isinstance(input, dict) else {"input": input}

    def build_result(self, *, value: Any, input: Any) -> Any:
        return value

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

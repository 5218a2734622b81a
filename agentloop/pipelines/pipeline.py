"""``BaseAgentPipeline``: stages run in order, each stage's output feeding the next."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentloop.actions.awaiting import maybe_await
from agentloop.loops.contract import ProgressCallback, Runnable, RunnableBase
from agentloop.loops.progress import ProgressStatus
from agentloop.loops.scope import RunScope, ensure_scope, failure_phase, use_scope


class BaseAgentPipeline(RunnableBase):
    """Set ``stages`` (runnable classes, in order); override ``build_stage_input`` to reshape.

    A stage may itself be a pipeline or a composite. The pipeline's result is
    the last stage's output. Stage ``i`` runs at path ``<path>/pipeline/<i>``.
    """

    stages: Sequence[type[Runnable]] = ()
    #: On Celery, the most consecutive loop and action stages one task runs, one after another,
    #: each recorded as it ends (``None``: the deployment's ``AGENTLOOP_PACK_SIZE``, else the
    #: packing rule's; ``1``: a task per stage). In-process it changes nothing; see the how-to on
    #: packing.
    pack_size: int | None = None

    def build_stage_input(self, *, index: int, previous_output: Any, input: Any) -> Any:
        """The input of stage ``index``; by default the previous stage's output."""
        return previous_output

    def stage_scope(self, *, scope: RunScope, index: int) -> RunScope:
        return scope.child(f"pipeline/{index}")

    async def emit_pipeline_event(
        self,
        *,
        scope: RunScope,
        on_progress: ProgressCallback | None,
        phase: str,
        status: ProgressStatus,
        done: int,
        message: str = "",
    ) -> None:
        """One progress event of the pipeline itself (shared by every runner)."""
        total = len(self.stages)
        event = self.make_event(
            scope=scope,
            iteration=done,
            max_iterations=total,
            phase=phase,
            status=status,
            message=message or f"{done} of {total} stages done",
        )
        await self.emit_progress(event=event, on_progress=on_progress)

    async def emit_stage_failure(
        self, *, scope: RunScope, on_progress: ProgressCallback | None, index: int, error: BaseException
    ) -> None:
        """The pipeline's ``failed`` event: stage ``index`` ended with ``error`` (shared by every runner)."""
        await self.emit_pipeline_event(
            scope=scope,
            on_progress=on_progress,
            phase=failure_phase(error, scope),
            status=ProgressStatus.FAILED,
            done=index,
            message=f"stage {index} failed: {type(error).__name__}: {error}",
        )

    async def run(self, *, input: Any, on_progress: ProgressCallback | None = None) -> Any:
        with ensure_scope() as scope:
            await self.emit_pipeline_event(
                scope=scope, on_progress=on_progress, phase="start", status=ProgressStatus.STARTED, done=0
            )
            previous = input
            index = 0
            try:
                for index, stage in enumerate(self.stages):
                    scope.check()
                    stage_input = await maybe_await(
                        self.build_stage_input(index=index, previous_output=previous, input=input)
                    )
                    with use_scope(self.stage_scope(scope=scope, index=index)):
                        previous = await stage.create(context=self.context).run(
                            input=stage_input, on_progress=on_progress
                        )
                    await self.emit_pipeline_event(
                        scope=scope,
                        on_progress=on_progress,
                        phase="stage",
                        status=ProgressStatus.PROGRESS,
                        done=index + 1,
                    )
            except BaseException as error:
                await self.emit_stage_failure(scope=scope, on_progress=on_progress, index=index, error=error)
                raise
            await self.emit_pipeline_event(
                scope=scope,
                on_progress=on_progress,
                phase="done",
                status=ProgressStatus.COMPLETED,
                done=len(self.stages),
            )
            return previous

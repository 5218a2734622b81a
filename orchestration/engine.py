"""The work of each Celery task, written against the core (no Celery here).

A task hands a :class:`~orchestration.wire.Node` and its input to a
:class:`NodeExecutor`, which answers with a :class:`Step`: a value (a loop or
action stage ran here, or a composite of width 0 merged), a pipeline to chain,
or branches to fan out. Pipelines and composites report their own progress
through the same ``emit_*`` methods the in-process engine uses, so both
runners produce the same events.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from actions.context import maybe_await
from actions.errors import BranchFailedError, RunStoppedError
from actions.usage import use_meter
from loops.contract import ProgressCallback
from loops.progress import ProgressStatus
from loops.scope import RunScope, use_scope
from orchestration.registry import RunnableRegistry
from orchestration.store import TERMINAL_STATUSES, RunStore
from orchestration.store.seams import ProgressPublisher, StoreCancelToken, StoreCheckpointer, StoreUsageMeter
from orchestration.wire import Ancestor, Node, failure_marker, is_failure_marker
from pipelines.composite import BaseCompositeAgent, BranchResult, FailurePolicy
from pipelines.pipeline import BaseAgentPipeline


@dataclass(frozen=True, kw_only=True)
class Step:
    """What the task does next: return ``value``, chain ``stages`` or fan out ``branches``."""

    value: Any = None
    node: Node | None = None  # the pipeline or composite that expands
    input: Any = None  # its input
    stages: int = 0  # > 0: chain the pipeline's stages
    pipeline_reads_input: bool = True  # build_stage_input overridden: it may read the input
    branches: Sequence[tuple[Node, Any]] = field(default_factory=tuple)

    @property
    def is_value(self) -> bool:
        return not self.stages and not self.branches


def _phase(error: BaseException) -> str:
    return str(getattr(error, "status", "error"))


class NodeExecutor:
    """Runs one node of a workflow inside a task; reports failures as the engine would."""

    def __init__(
        self,
        *,
        registry: RunnableRegistry,
        store: RunStore,
        update_state: Callable[[dict[str, Any]], None] | None = None,
        progress_interval: float = 0.2,
        checkpoint_interval: float = 0.0,
    ) -> None:
        self.registry, self.store = registry, store
        self.update_state, self.progress_interval = update_state, progress_interval
        self.checkpoint_interval = checkpoint_interval

    def publisher(self, node: Node) -> ProgressPublisher:
        return ProgressPublisher(
            store=self.store,
            run_id=node.run_id,
            update_state=self.update_state,
            interval=self.progress_interval,
        )

    def scope(self, node: Node, *, checkpoint: tuple[int, Any] | None = None) -> RunScope:
        return RunScope(
            run_id=node.run_id,
            path=node.path,
            cancel=StoreCancelToken(self.store, node.run_id),
            checkpointer=StoreCheckpointer(
                self.store, node.run_id, interval=self.checkpoint_interval, loaded={node.path: checkpoint}
            ),
        )

    def instance(self, name: str, node: Node) -> Any:
        registration = self.registry.get(name)
        return registration.runnable.create(context=registration.build_context(node.context))

    # ----- the node itself --------------------------------------------------------------------

    async def start(
        self, node: Node, input: Any, publisher: ProgressPublisher | None = None
    ) -> Step | dict[str, Any]:
        """Run ``node`` here (a loop or action stage) or say how it expands.

        The task's events go out through one ``publisher``, written when the task ends.
        """
        if publisher is not None:
            return await self._start(node, input, publisher)
        publisher = self.publisher(node)
        try:
            return await self._start(node, input, publisher)
        finally:
            publisher.flush(final=True)

    async def _start(self, node: Node, input: Any, on_progress: ProgressPublisher) -> Step | dict[str, Any]:
        scope = self.scope(node)
        try:
            scope.check()
            instance = self.instance(node.runnable, node)
        except Exception as error:
            return self.fail(node, error)
        if isinstance(instance, BaseAgentPipeline):
            return await self._start_pipeline(node, instance, scope, input, on_progress)
        if isinstance(instance, BaseCompositeAgent):
            return await self._start_composite(node, instance, scope, input, on_progress)
        finished, result, checkpoint = self.store.loop_state(node.run_id, node.path)
        if finished:  # a redelivered task whose work is already done
            return Step(value=result)
        scope = self.scope(node, checkpoint=checkpoint)
        try:
            with use_scope(scope), use_meter(StoreUsageMeter(self.store, node.run_id)):
                result = await instance.run(input=input, on_progress=on_progress)
        except Exception as error:
            on_progress.flush(final=True)
            return self.fail(node, error)
        # The result and the task's progress, written together.
        self.store.finish_loop(node.run_id, node.path, result, events=on_progress.take())
        return Step(value=result)

    async def _start_pipeline(
        self,
        node: Node,
        pipeline: BaseAgentPipeline,
        scope: RunScope,
        input: Any,
        on_progress: ProgressCallback,
    ) -> Step:
        await pipeline.emit_pipeline_event(
            scope=scope, on_progress=on_progress, phase="start", status=ProgressStatus.STARTED, done=0
        )
        if not pipeline.stages:
            await pipeline.emit_pipeline_event(
                scope=scope, on_progress=on_progress, phase="done", status=ProgressStatus.COMPLETED, done=0
            )
            return Step(value=input)
        reads_input = type(pipeline).build_stage_input is not BaseAgentPipeline.build_stage_input
        return Step(node=node, input=input, stages=len(pipeline.stages), pipeline_reads_input=reads_input)

    async def _start_composite(
        self,
        node: Node,
        composite: BaseCompositeAgent,
        scope: RunScope,
        input: Any,
        on_progress: ProgressPublisher,
    ) -> Step | dict[str, Any]:
        try:
            branches = await composite.resolve_branches(input=input)
            children = [
                (
                    node.child(
                        runnable=self.registry.name_of(branch.runnable),
                        segment=f"branch/{branch.key}",
                        parent=Ancestor(
                            kind="composite",
                            runnable=node.runnable,
                            path=node.path,
                            position=branch.key,
                            width=len(branches),
                            fail_fast=composite.failure_policy == FailurePolicy.FAIL_FAST,
                        ),
                    ),
                    branch.input,
                )
                for branch in branches
            ]
        except Exception as error:
            return self.fail(node, error)
        await composite.emit_composite_event(
            scope=scope,
            on_progress=on_progress,
            phase="start",
            status=ProgressStatus.STARTED,
            width=len(branches),
            done=0,
        )
        if not branches:
            return await self.merge(node, [], input, on_progress=on_progress)
        return Step(node=node, input=input, branches=children)

    # ----- pipeline stages --------------------------------------------------------------------

    async def stage(self, previous: Any, node: Node, index: int, input: Any) -> Step | dict[str, Any]:
        """Stage ``index`` of the pipeline ``node``: report the last stage done, build the input."""
        if is_failure_marker(previous):
            return dict(previous)
        publisher = self.publisher(node)
        try:
            pipeline = self.instance(node.runnable, node)
            assert isinstance(pipeline, BaseAgentPipeline)
            scope = self.scope(node)
            if index > 0:
                await pipeline.emit_pipeline_event(
                    scope=scope,
                    on_progress=publisher,
                    phase="stage",
                    status=ProgressStatus.PROGRESS,
                    done=index,
                )
            try:
                scope.check()
                stage_input = await maybe_await(
                    pipeline.build_stage_input(index=index, previous_output=previous, input=input)
                )
                stage_cls = pipeline.stages[index]
                child = node.child(
                    runnable=self.registry.name_of(stage_cls),
                    segment=f"pipeline/{index}",
                    parent=Ancestor(
                        kind="pipeline",
                        runnable=node.runnable,
                        path=node.path,
                        position=str(index),
                        width=len(pipeline.stages),
                    ),
                )
            except Exception as error:
                await pipeline.emit_pipeline_event(
                    scope=scope,
                    on_progress=publisher,
                    phase=_phase(error),
                    status=ProgressStatus.FAILED,
                    done=index,
                    message=f"stage {index} failed: {type(error).__name__}: {error}",
                )
                publisher.flush(final=True)
                return self.fail(node, error)
            return await self.start(child, stage_input, publisher)
        finally:
            publisher.flush(final=True)

    async def pipeline_done(self, previous: Any, node: Node) -> Any:
        if is_failure_marker(previous):
            return previous
        publisher = self.publisher(node)
        pipeline = self.instance(node.runnable, node)
        assert isinstance(pipeline, BaseAgentPipeline)
        scope, total = self.scope(node), len(pipeline.stages)
        await pipeline.emit_pipeline_event(
            scope=scope, on_progress=publisher, phase="stage", status=ProgressStatus.PROGRESS, done=total
        )
        await pipeline.emit_pipeline_event(
            scope=scope, on_progress=publisher, phase="done", status=ProgressStatus.COMPLETED, done=total
        )
        publisher.flush(final=True)
        return previous

    # ----- composite fan-in -------------------------------------------------------------------

    async def merge(
        self, node: Node, outputs: Sequence[Any], input: Any, *, on_progress: ProgressPublisher | None = None
    ) -> Step | dict[str, Any]:
        """Fan-in: turn branch outputs (failure markers included) into results and merge them."""
        publisher = on_progress or self.publisher(node)
        try:
            composite = self.instance(node.runnable, node)
            assert isinstance(composite, BaseCompositeAgent)
            branches = await composite.resolve_branches(input=input)
            results: list[BranchResult] = []
            for branch, output in zip(branches, outputs, strict=True):
                if is_failure_marker(output):
                    failure = output["__agentloop_failure__"]
                    if failure["capture"] != node.path:
                        return dict(output)  # a failure an outer composite collects
                    results.append(BranchResult(key=branch.key, ok=False, error=_error_of(failure)))
                else:
                    results.append(BranchResult(key=branch.key, ok=True, output=output))
            scope, width = self.scope(node), len(branches)

            async def emit(phase: str, status: ProgressStatus, done: int, message: str = "") -> None:
                await composite.emit_composite_event(
                    scope=scope,
                    on_progress=publisher,
                    phase=phase,
                    status=status,
                    width=width,
                    done=done,
                    message=message,
                )

            await emit("merge", ProgressStatus.PROGRESS, width)
            try:
                merged = await maybe_await(composite.merge_results(results=results, input=input))
            except Exception as error:
                await emit(_phase(error), ProgressStatus.FAILED, 0, f"{type(error).__name__}: {error}")
                publisher.flush(final=True)
                return self.fail(node, error)
            await emit("done", ProgressStatus.COMPLETED, width)
            return Step(value=merged)
        finally:
            publisher.flush(final=True)

    # ----- failure ----------------------------------------------------------------------------

    def fail(self, node: Node, error: BaseException) -> dict[str, Any]:
        """Report ``error`` at every enclosing level, as the engine would, up to the root (then
        record the run's end and raise) or up to the collecting composite (then return a marker)."""
        publisher = self.publisher(node)
        reported = {e["path"] for _, e in self.store.events(node.run_id) if e.get("status") == "failed"}
        try:
            for ancestor in reversed(node.ancestors):
                if node.capture is not None and ancestor.path == node.capture:
                    return failure_marker(capture=node.capture, error=error)
                error = self._report_ancestor(node, ancestor, error, publisher, reported)
        finally:
            publisher.flush(final=True)
        self.store.finish_run(
            node.run_id,
            status=_run_status(error),
            error={"type": type(error).__name__, "message": str(error)},
        )
        raise error

    def _report_ancestor(
        self,
        node: Node,
        ancestor: Ancestor,
        error: BaseException,
        publisher: ProgressPublisher,
        reported: set[str],
    ) -> BaseException:
        instance: Any = self.registry.get(ancestor.runnable).runnable.create(context=None)
        scope = RunScope(run_id=node.run_id, path=ancestor.path)
        if ancestor.kind == "composite" and not isinstance(error, RunStoppedError):
            error = BranchFailedError(ancestor.position, error)
        if ancestor.path in reported:
            return error
        reported.add(ancestor.path)
        if ancestor.kind == "pipeline":
            message = f"stage {ancestor.position} failed: {type(error).__name__}: {error}"
            event = instance.make_event(
                scope=scope,
                iteration=int(ancestor.position),
                max_iterations=ancestor.width,
                phase=_phase(error),
                status=ProgressStatus.FAILED,
                message=message,
            )
        else:
            event = instance.make_event(
                scope=scope,
                iteration=0,
                max_iterations=ancestor.width,
                phase=_phase(error),
                status=ProgressStatus.FAILED,
                message=f"{type(error).__name__}: {error}",
                data={"width": ancestor.width},
            )
        publisher(event)
        return error


def _run_status(error: BaseException) -> str:
    """The run's final status for the error that ended it (``failed`` unless it says otherwise)."""
    status = str(getattr(error, "status", "failed"))
    return status if status in TERMINAL_STATUSES else "failed"


def _error_of(failure: dict[str, Any]) -> dict[str, str]:
    return {"type": str(failure["type"]), "message": str(failure["message"])}

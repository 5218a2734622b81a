"""What each node of a workflow becomes, decided without Celery.

A task hands a :class:`~agentloop.orchestration.wire.WorkflowNode` and its input to the
:class:`WorkflowEngine`,
which answers with an :data:`~agentloop.orchestration.runtime.next_step.Outcome`: a value, a
pipeline's stages to chain,
branches to fan out, or a :class:`~agentloop.orchestration.wire.BranchFailure` that travels to the composite
collecting it. The Celery adapter turns an outcome into a return value or a canvas (``canvas.py``).
Errors leave the engine without the context spec or the task's ``secrets`` in their text (``scrub_error``).

Every progress event comes from the core: pipelines and composites emit their
own events through the methods the in-process engine uses
(``emit_pipeline_event``, ``emit_stage_failure``, ``emit_composite_event``,
``emit_composite_failure``), so both runners produce the same events.
As inline, every task holds the run's one deadline, and a loop's model failures
become its events, from which :meth:`WorkflowEngine.finish` records ``degraded``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.caching import StepCache
from agentloop.actions.errors import RunStoppedError
from agentloop.actions.human import RunPaused
from agentloop.actions.recording import RUN, RecordedEntry, Recorder
from agentloop.actions.tracing import Tracer
from agentloop.actions.usage import use_meter
from agentloop.loops.progress import ProgressEvent, ProgressStatus
from agentloop.loops.run_outcome import (
    STOPPED_BY_BOUND,
    STOPPED_COMPLETE,
    DegradationRecorder,
    bounded_paths,
    degradation_error,
    degraded_event,
    failures_in,
)
from agentloop.loops.scope import RunScope, monotonic_deadline, use_scope, within_deadline
from agentloop.orchestration.errors import DeliveryLimitError, InvalidNodeError, StoreUnavailableError
from agentloop.orchestration.metrics import record as metrics
from agentloop.orchestration.packing.lag import Blocked, LagWatch
from agentloop.orchestration.packing.rule import plain_work, why_not_joined, why_not_packed
from agentloop.orchestration.packing.threads import current_pack_threads, pack_threads
from agentloop.orchestration.redaction import context_secrets, scrub_error, scrub_values
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.runtime.next_step import (
    ChainStages,
    Done,
    FanOut,
    LeavesPack,
    Outcome,
    StagesLeft,
)
from agentloop.orchestration.runtime.run_end import end_with_failure, failed_paths, report_ancestor_failure
from agentloop.orchestration.store import RunStore, StartedLoop
from agentloop.orchestration.store.batch_rounds import BatchRounds
from agentloop.orchestration.store.bulk import RunEnd
from agentloop.orchestration.store.human_channel import StoreHumanChannel
from agentloop.orchestration.store.pack_writes import PackWrites
from agentloop.orchestration.store.recordings import recording_store_for
from agentloop.orchestration.store.seams import (
    ProgressPublisher,
    StoreCancelSignal,
    StoreCheckpointer,
    StoreUsageMeter,
)
from agentloop.orchestration.store.waits import WaitStore
from agentloop.orchestration.wire import Ancestor, BranchFailure, DegradedResult, WorkflowNode
from agentloop.pipelines.composite import BaseCompositeAgent, BranchResult, FailurePolicy, check_pack_size
from agentloop.pipelines.pipeline import BaseAgentPipeline

R = TypeVar("R")

logger = logging.getLogger(__name__)

#: The phase of the event a packed branch gets when it blocked its pack's event loop.
LOOP_BLOCKED = "loop_blocked"

#: What a branch that blocked its pack's event loop should do instead (the lag report's fix).
LAG_FIX = (
    "make the blocking code a coroutine that awaits its waits (or run it off the loop with "
    "asyncio.to_thread), or give the composite pack_size = 1 to run each branch in a task of its own"
)


@dataclass(slots=True)
class NextStage:
    """The stage after the one a task is running (at ``path``): started, its delivery counted and
    its record read (``record``), in the transaction that records the running one's result,
    unless the task's time (``deadline``, monotonic; ``None``: none) is up by then."""

    path: str
    deadline: float | None = None
    record: StartedLoop | None = None

    def wanted(self) -> bool:
        """Whether the task goes on to this stage (its time is not up)."""
        return self.deadline is None or time.monotonic() < self.deadline


class WorkflowEngine:
    """Runs one node of a workflow inside a task; reports failures as the in-process engine would."""

    def __init__(
        self,
        *,
        registry: RunnableRegistry,
        store: RunStore,
        update_state: Callable[[dict[str, Any]], None] | None = None,
        progress_interval: float = 0.2,
        checkpoint_interval: float = 0.0,
        waits: WaitStore | None = None,
        tracer: Tracer | None = None,
        cache: StepCache | None = None,
        events_interval: float | None = None,
        secrets: Callable[[], Sequence[str]] | None = None,
        key_texts: Sequence[str] = (),
        delivery_limit: int | None = None,
    ) -> None:
        self.registry, self.store, self.waits, self.tracer = registry, store, waits, tracer
        self.secrets = secrets or tuple  # the texts of the task's hidden arguments, read on a failure
        self.cache = cache  # where cached steps keep their results (``orchestration/runtime/step_cache.py``)
        self.update_state, self.progress_interval = update_state, progress_interval
        # how long a task's events wait to be written together (default: ``progress_interval``)
        self.events_interval = progress_interval if events_interval is None else events_interval
        self.checkpoint_interval = checkpoint_interval
        self.key_texts = tuple(key_texts)  # the model keys: a recording never keeps them
        # how often a loop may start without progress before its run ends (``AGENTLOOP_DELIVERY_LIMIT``)
        self.delivery_limit = delivery_limit

    def recorder(self, node: WorkflowNode) -> Recorder | None:
        """Where a recorded node's entries go: the run store's recordings, under the root run, each
        written as its step gets it, with the model keys taken out (``None``: not recorded)."""
        recordings = recording_store_for(self.store) if node.record else None
        if recordings is None:
            return None
        keys = self.key_texts

        def write(entry: RecordedEntry) -> None:
            data = scrub_values(entry.to_dict()["data"], keys)
            recordings.add(node.run_id, [replace(entry, data=data)])

        return Recorder(write)

    def record_start(self, node: WorkflowNode) -> None:
        """Keep a recorded run's context spec with its recording (what a replay builds its context
        from); nothing for a run that is not recorded."""
        recordings = recording_store_for(self.store) if node.record else None
        if recordings is not None:
            spec = scrub_values(dict(node.context), self.key_texts)
            entry = RecordedEntry(path=node.path, iteration=0, kind=RUN, seq=0, data={"context": spec})
            recordings.add(node.run_id, [entry])

    def publisher(self, node: WorkflowNode, *, stored_failures: bool | None = None) -> ProgressPublisher:
        """The task's publisher of ``node``'s events (``stored_failures``: whether the store holds a
        model failure of the run, when the caller knows; ``ProgressPublisher``)."""
        return ProgressPublisher(
            stored_failures=stored_failures,
            store=self.store,
            run_id=node.run_id,
            update_state=self.update_state,
            interval=self.events_interval,
            state_interval=self.progress_interval,
            secrets=context_secrets(node.context),
            failure_secrets=self.secrets,
        )

    def scope(
        self,
        node: WorkflowNode,
        *,
        checkpoint: tuple[int, Any] | None = None,
        degradation: DegradationRecorder | None = None,
        writes: PackWrites | None = None,
        publisher: ProgressPublisher | None = None,
        meter: StoreUsageMeter | None = None,
    ) -> RunScope:
        return RunScope(
            run_id=node.run_id,
            path=node.path,
            deadline=monotonic_deadline(node.deadline),
            degradation=degradation,
            events=degradation,
            human=None if self.waits is None else StoreHumanChannel(self.waits, node.run_id),
            tracer=self.tracer,
            cache=self.cache,
            recording=self.recorder(node),
            offload=current_pack_threads(),  # a pack's plain-function work runs in its threads
            cancel=StoreCancelSignal(
                self.store, node.run_id, offload=current_pack_threads()
            ),  # and its reads
            checkpointer=StoreCheckpointer(
                self.store,
                node.run_id,
                interval=self.checkpoint_interval,
                loaded={node.path: checkpoint},
                writes=writes,
                before_save=None if publisher is None else publisher.flush,
                meter=None if writes is not None else meter,  # a pack's goes with its writes
            ),
        )

    def instance(self, node: WorkflowNode, contexts: dict[tuple[str, str], Any] | None = None) -> Any:
        """The node's runnable, with the context its factory builds from the node's spec.

        ``contexts``: the contexts a pack built already, by runnable and spec: a pack's branches
        of one runnable and spec whose work is a coroutine share one, as a composite's branches
        share its context in-process, all on one thread (one factory call per pack, not one per
        branch); a branch whose work runs in the pack's threads gets its own."""
        registration = self.registry.get(node.runnable)
        spec = None if contexts is None or plain_work(registration.runnable) else _spec_key(node.context)
        if contexts is None or spec is None:
            return registration.runnable.create(context=registration.build_context(node.context))
        key = (node.runnable, spec)
        context = contexts.get(key, _UNBUILT)
        if context is _UNBUILT:
            context = contexts[key] = registration.build_context(node.context)
        return registration.runnable.create(context=context)

    def instance_of(self, node: WorkflowNode, kind: type[R]) -> R:
        instance = self.instance(node)
        if not isinstance(instance, kind):
            raise InvalidNodeError(f"{node.runnable!r} at {node.path!r} is not a {kind.__name__}")
        return instance

    # ----- the node itself --------------------------------------------------------------------

    async def start(
        self,
        node: WorkflowNode,
        input: Any,
        publisher: ProgressPublisher | None = None,
        writes: PackWrites | None = None,
        record: StartedLoop | None = None,
        following: NextStage | None = None,
        contexts: dict[tuple[str, str], Any] | None = None,
        meter: StoreUsageMeter | None = None,
    ) -> Outcome:
        """Run ``node`` here (a loop or action stage) or say how it expands.

        The task's events go out through one ``publisher``, written when the task ends; a
        packed loop's checkpoints and result go with its pack's (``writes``), its record,
        when it may have run before, is read with theirs (``record``), its context is shared
        with theirs (``contexts``, :meth:`instance`), and its token usage summed with theirs
        (``meter``: one meter, one write per interval, for a pack's branches of one run); a
        stage's result is written with the start of the stage after it in the same task
        (``following``).
        """
        if publisher is not None:
            return await self._start(node, input, publisher, writes, record, following, contexts, meter)
        publisher = self.publisher(node)
        try:
            return await self._start(node, input, publisher)
        finally:
            publisher.flush(final=True)

    async def start_pack(
        self, nodes: Sequence[WorkflowNode], inputs: Sequence[Any]
    ) -> list[Outcome | LeavesPack]:
        """Run the loops ``nodes`` (branches of one composite, of one run) together on this event
        loop, each as :meth:`start` runs one: its own checkpoints, result, events and failure.

        Their events go out through one publisher (written together; the first branch to end
        writes those buffered with its result). A branch whose failure ends the run (fail fast,
        a stop) stops the others at once and is raised. A run store that stays away is raised
        once every other branch has ended: their results are recorded, so the pack's next try
        runs only the rest. A branch paused for a person's answer is :class:`LeavesPack`: it
        leaves the pack, which ends with the others, and goes on in a task of its own (any
        number of a pack's branches may wait at once).
        """
        if not nodes:
            return []
        publisher = self.publisher(nodes[0])  # its events go with the pack's checkpoints (pack_writes.py)
        # Every delivery of a pack counts itself and reads its branches' records in one statement.
        paths = [node.path for node in nodes]
        records = dict(zip(paths, self.store.start_loops(nodes[0].run_id, paths), strict=True))
        contexts: dict[tuple[str, str], Any] = {}  # one context per runnable and spec (instance())
        # one usage meter for the run's branches: its usage written once per interval, not per branch
        meter = StoreUsageMeter(self.store, nodes[0].run_id, interval=self.events_interval)
        with pack_threads() as threads:  # each task keeps the pack's threads
            publisher.state_offload = threads  # the PROGRESS state goes out from a thread too
            # the pack's writes go to the store from a thread: the loop runs on meanwhile
            writes = PackWrites(self.store, nodes[0].run_id, events=publisher, usage=meter, offload=threads)
            publisher.events_writer = writes.events_due  # its due events too, in turn, off the loop
            tasks = [
                asyncio.ensure_future(
                    self.start(
                        node, value, publisher, writes, records.get(node.path), contexts=contexts, meter=meter
                    )
                )
                for node, value in zip(nodes, inputs, strict=True)
            ]
            try:
                return await self._run_pack(nodes, inputs, tasks, publisher, writes)
            finally:
                meter.flush(after_failure=True)  # what the branches that did not finish used

    async def _run_pack(
        self,
        nodes: Sequence[WorkflowNode],
        inputs: Sequence[Any],
        tasks: Sequence[asyncio.Future[Outcome]],
        publisher: ProgressPublisher,
        writes: PackWrites,
    ) -> list[Outcome | LeavesPack]:
        watch = LagWatch(self._lag_reporter(nodes, publisher))
        heartbeat = asyncio.ensure_future(watch.heartbeat())
        try:
            pending: set[asyncio.Future[Outcome]] = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
                ending = [task for task in done if _ends_pack(task)]
                if ending:
                    raise ending[0].exception()  # type: ignore[misc]  # the finally stops the rest
            away = [task.exception() for task in tasks if _store_away(task)]
            if away:
                raise away[0]  # type: ignore[misc]
            return [
                LeavesPack(node=node, input=value) if task.exception() is not None else task.result()
                for task, node, value in zip(tasks, nodes, inputs, strict=True)
            ]  # what is left raised RunPaused: _ends_pack let nothing else through
        finally:
            heartbeat.cancel()
            unfinished = [task for task in tasks if not task.done()]
            for task in unfinished:
                task.cancel()
            await asyncio.gather(heartbeat, *unfinished, return_exceptions=True)
            await writes.drain()  # a write still in its thread ends before the last events go
            await publisher.settle()  # and a state publication before the task's own end
            publisher.flush(final=True)

    def _lag_reporter(
        self, nodes: Sequence[WorkflowNode], publisher: ProgressPublisher
    ) -> Callable[[Blocked, float], None]:
        """What a pack does when one of its branches blocked its event loop (``packing/lag.py``):
        a warning in the log, a ``loop_blocked`` event of that branch, and the metric, each
        naming the branch, where its code was, and the fix."""
        by_path = {node.path: node for node in nodes}

        def report(blocked: Blocked, seconds: float) -> None:
            node = by_path.get(blocked.path)
            if node is None:  # a scope that is not one of the pack's branches: its nearest
                node = next((n for p, n in by_path.items() if blocked.path.startswith(f"{p}/")), None)
            if node is None:
                return
            others = len(nodes) - 1
            message = (
                f"branch {node.path} ({node.runnable}) blocked its pack's event loop for "
                f"{seconds:.2f} s in {blocked.where}; its {others} other branches waited: {LAG_FIX}"
            )
            logger.warning("Run %s: %s", node.run_id, message)
            event = ProgressEvent(
                run_id=node.run_id,
                path=node.path,
                runnable=node.runnable,
                iteration=0,
                max_iterations=0,
                phase=LOOP_BLOCKED,
                status=ProgressStatus.PROGRESS,
                message=message,
                data={"seconds": round(seconds, 3), "where": blocked.where, "fix": LAG_FIX, "waited": others},
            )
            publisher(event)
            metrics.pack_loop_blocked(node.runnable, seconds)

        return report

    async def _start(
        self,
        node: WorkflowNode,
        input: Any,
        publisher: ProgressPublisher,
        writes: PackWrites | None = None,
        record: StartedLoop | None = None,
        following: NextStage | None = None,
        contexts: dict[tuple[str, str], Any] | None = None,
        meter: StoreUsageMeter | None = None,
    ) -> Outcome:
        try:  # the run's cancel flag and deadline first: a scope of those alone (a loop's comes below)
            RunScope(
                run_id=node.run_id,
                path=node.path,
                deadline=monotonic_deadline(node.deadline),
                cancel=StoreCancelSignal(self.store, node.run_id),
            ).check()
            instance = self.instance(node, contexts)
        except Exception as error:
            return await self.fail(node, error)
        if isinstance(instance, BaseAgentPipeline):
            return await self._start_pipeline(node, instance, self.scope(node), input, publisher)
        if isinstance(instance, BaseCompositeAgent):
            return await self._start_composite(node, instance, self.scope(node), input, publisher)
        # Any delivery, redelivered or not (a duplicate is not flagged), counts itself and reads
        # what an earlier try or a twin left, in one statement.
        if record is None:
            (record,) = self.store.start_loops(node.run_id, [node.path])
        (finished, result, checkpoint), deliveries = record
        if finished:  # a redelivered task, or a duplicate, whose work is already done
            return Done(value=result)
        if self.delivery_limit is not None and deliveries > self.delivery_limit:
            return await self.fail(node, _past_limit(node, deliveries, self.delivery_limit))
        # Model failures the loop survives become events of this task (loops/run_outcome.py).
        degradations = DegradationRecorder(run_id=node.run_id, on_progress=publisher)
        if meter is None:
            meter = StoreUsageMeter(self.store, node.run_id, interval=self.events_interval)
        scope = self.scope(
            node,
            checkpoint=checkpoint,
            degradation=degradations,
            writes=writes,
            publisher=publisher,
            meter=meter,
        )
        began = time.perf_counter()
        try:
            with use_scope(scope), use_meter(meter):
                result = await within_deadline(scope, instance.run(input=input, on_progress=publisher))
        except RunPaused:  # waits on a person's answer; its task ends here (celery_adapter/pause.py)
            metrics.step_ended(node.runnable, "paused", time.perf_counter() - began)
            raise
        except Exception as error:
            metrics.step_ended(node.runnable, "failed", time.perf_counter() - began)
            publisher.flush(final=True)
            meter.flush(after_failure=True)
            return await self.fail(node, error)
        metrics.step_ended(node.runnable, "completed", time.perf_counter() - began)
        # The result, the task's progress and its usage, written together; a twin's result stands.
        used, events = meter.take(), publisher.take()
        tokens = {"input_tokens": used.input_tokens, "output_tokens": used.output_tokens}
        if writes is not None:
            return Done(value=await writes.finish(node.path, result, events=events, **tokens))
        if following is not None and following.wanted():
            value, following.record = self.store.finish_loop_then_start(
                node.run_id, node.path, result, following.path, events=events, **tokens
            )
            return Done(value=value)
        return Done(value=self.store.finish_loop(node.run_id, node.path, result, events=events, **tokens))

    async def _start_pipeline(
        self,
        node: WorkflowNode,
        pipeline: BaseAgentPipeline,
        scope: RunScope,
        input: Any,
        publisher: ProgressPublisher,
    ) -> Outcome:
        async def emit(phase: str, status: ProgressStatus) -> None:
            await pipeline.emit_pipeline_event(
                scope=scope, on_progress=publisher, phase=phase, status=status, done=0
            )

        try:
            check_pack_size(pipeline.pack_size)
        except ValueError as error:
            return await self.fail(node, error)
        await emit("start", ProgressStatus.STARTED)
        if not pipeline.stages:
            await emit("done", ProgressStatus.COMPLETED)
            return Done(value=input)
        carries = type(pipeline).build_stage_input is not BaseAgentPipeline.build_stage_input
        return ChainStages(
            node=node,
            input=input,
            stages=len(pipeline.stages),
            carries_input=carries,
            joinable=frozenset(
                index for index, stage in enumerate(pipeline.stages) if why_not_joined(stage) is None
            ),
            pack_size=pipeline.pack_size,
        )

    async def _start_composite(
        self,
        node: WorkflowNode,
        composite: BaseCompositeAgent,
        scope: RunScope,
        input: Any,
        publisher: ProgressPublisher,
    ) -> Outcome:
        try:
            branches = await composite.resolve_branches(input=input)
            fail_fast = composite.failure_policy == FailurePolicy.FAIL_FAST
            children = [
                (
                    self.branch_node(
                        node, self.registry.name_of(branch.runnable), branch.key, len(branches), fail_fast
                    ),
                    branch.input,
                )
                for branch in branches
            ]
        except Exception as error:
            return await self.fail(node, error)
        await composite.emit_composite_event(
            scope=scope,
            on_progress=publisher,
            phase="start",
            status=ProgressStatus.STARTED,
            width=len(branches),
            done=0,
        )
        if not branches:
            return await self.merge(node, [], input, publisher=publisher)
        return FanOut(
            node=node,
            input=input,
            branches=children,
            max_concurrency=composite.max_concurrency,
            pack_size=composite.pack_size,
            expanding=frozenset(
                index
                for index, branch in enumerate(branches)
                if isinstance(branch.runnable, type)
                and issubclass(branch.runnable, BaseAgentPipeline | BaseCompositeAgent)
            ),
            solo=frozenset(
                index
                for index, branch in enumerate(branches)
                if not (
                    isinstance(branch.runnable, type)
                    and issubclass(branch.runnable, BaseAgentPipeline | BaseCompositeAgent)
                )
                and why_not_packed(branch.runnable) is not None
            ),
        )

    @staticmethod
    def branch_node(node: WorkflowNode, runnable: str, key: str, width: int, fail_fast: bool) -> WorkflowNode:
        """Branch ``key`` (of ``width``) of the composite ``node``, running the registered ``runnable``."""
        parent = Ancestor(
            kind="composite",
            runnable=node.runnable,
            path=node.path,
            position=key,
            width=width,
            fail_fast=fail_fast,
        )
        return node.child(runnable=runnable, segment=f"branch/{key}", parent=parent)

    # ----- pipeline stages --------------------------------------------------------------------

    async def stage(self, previous: Any, node: WorkflowNode, index: int, input: Any) -> Outcome:
        """Stage ``index`` of the pipeline ``node``: report the last stage done, build the input."""
        outcome = await self.stages(previous, node, index, 1, input)
        assert not isinstance(outcome, StagesLeft)  # one stage, no time limit: nothing is left
        return outcome

    async def stages(
        self,
        previous: Any,
        node: WorkflowNode,
        index: int,
        count: int,
        input: Any,
        *,
        seconds: float | None = None,
        hand_on: Callable[[Any], None] | None = None,
    ) -> Outcome | StagesLeft:
        """Stages ``index`` to ``index + count - 1`` of the pipeline ``node``, one after another in
        this task, each as :meth:`stage` runs it (its events, its result recorded as it ends, its
        failure); the last one's outcome, or the first that is not a value. After ``seconds``
        (``None``: no limit) the stages left are :class:`StagesLeft`, for a task of their own.
        ``hand_on`` checks each output handed on to the next stage in this task as the message a
        chain would carry it in is checked (what raises fails the pipeline, as it would in a chain,
        whether or not the stages share a task). A node that may have run before skips, in one
        read, the stages that recorded a result."""
        failure = BranchFailure.from_wire(previous)
        if failure is not None:
            return failure
        publisher = self.publisher(node)
        try:
            pipeline = self.instance_of(node, BaseAgentPipeline)
            stop = index + count
            if index < 0 or count < 1 or stop > len(pipeline.stages):
                total = len(pipeline.stages)
                problem = InvalidNodeError(f"stages {index} to {stop - 1} of a pipeline of {total} stages")
                return await self.fail(node, problem)
            if not node.fresh:
                index, previous = self._stages_done(node, pipeline, index, stop, previous)
                if index == stop:
                    return Done(value=previous)
            deadline = None if seconds is None else time.monotonic() + seconds
            record: StartedLoop | None = None
            while True:
                following = None
                if index + 1 < stop:
                    following = NextStage(
                        path=self._stage_node(node, pipeline, index + 1).path, deadline=deadline
                    )
                outcome = await self._stage(
                    previous, node, pipeline, index, input, publisher, record, following
                )
                index += 1
                if index == stop or not isinstance(outcome, Done):
                    if index == stop or isinstance(outcome, BranchFailure):
                        return outcome
                    return StagesLeft(
                        node=node,
                        previous=None,
                        index=index,
                        count=stop - index,
                        input=input,
                        expanded=outcome,
                    )
                previous = outcome.value
                if hand_on is not None:
                    try:
                        hand_on(previous)
                    except Exception as error:
                        return await self.fail(node, error)
                record = None if following is None else following.record
                if record is None and following is not None and not following.wanted():  # its time is up
                    return StagesLeft(
                        node=node, previous=previous, index=index, count=stop - index, input=input
                    )
        finally:
            publisher.flush(final=True)

    def _stages_done(
        self, node: WorkflowNode, pipeline: BaseAgentPipeline, index: int, stop: int, previous: Any
    ) -> tuple[int, Any]:
        """The first of the stages ``index`` to ``stop - 1`` without a recorded result, and the
        output it is fed: the result of the stage before it (``previous`` when that is none of them)."""
        paths = [self._stage_node(node, pipeline, position).path for position in range(index, stop)]
        for finished, result, _checkpoint in self.store.loop_records(node.run_id, paths):
            if not finished:
                break
            index, previous = index + 1, result
        return index, previous

    def _stage_node(self, node: WorkflowNode, pipeline: BaseAgentPipeline, index: int) -> WorkflowNode:
        """Stage ``index`` of the pipeline ``node``."""
        parent = Ancestor(
            kind="pipeline",
            runnable=node.runnable,
            path=node.path,
            position=str(index),
            width=len(pipeline.stages),
        )
        name = self.registry.name_of(pipeline.stages[index])
        return node.child(runnable=name, segment=f"pipeline/{index}", parent=parent)

    async def _stage(
        self,
        previous: Any,
        node: WorkflowNode,
        pipeline: BaseAgentPipeline,
        index: int,
        input: Any,
        publisher: ProgressPublisher,
        record: StartedLoop | None = None,
        following: NextStage | None = None,
    ) -> Outcome:
        """Stage ``index`` of ``pipeline`` (the node ``node``), its events through ``publisher``
        (its ``record`` read already, the stage after it ``following``: :meth:`start`)."""
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
            child = self._stage_node(node, pipeline, index)
        except Exception as error:
            await pipeline.emit_stage_failure(scope=scope, on_progress=publisher, index=index, error=error)
            publisher.flush(final=True)
            return await self.fail(node, error)
        return await self.start(child, stage_input, publisher, record=record, following=following)

    async def pipeline_done(self, previous: Any, node: WorkflowNode) -> Outcome:
        """Close the pipeline ``node``: its output is the last stage's."""
        failure = BranchFailure.from_wire(previous)
        if failure is not None:
            return failure
        if not node.fresh and self._closed_already(node):  # a twin chain (a copy of its launch) closed it
            return Done(value=previous)
        publisher = self.publisher(node)
        pipeline = self.instance_of(node, BaseAgentPipeline)
        scope, total = self.scope(node), len(pipeline.stages)
        await pipeline.emit_pipeline_event(
            scope=scope, on_progress=publisher, phase="stage", status=ProgressStatus.PROGRESS, done=total
        )
        await pipeline.emit_pipeline_event(
            scope=scope, on_progress=publisher, phase="done", status=ProgressStatus.COMPLETED, done=total
        )
        publisher.flush(final=True)
        return Done(value=previous)

    def _closed_already(self, node: WorkflowNode) -> bool:
        """Whether the run's events already hold ``node``'s ``done``: a second copy of a launch
        runs a chain of its own beside the first, and its close would report the end twice."""
        done = self.store.events(node.run_id, phase="done", status=ProgressStatus.COMPLETED.value)
        return any(event.get("path") == node.path for _, event in done)

    # ----- composite fan-in -------------------------------------------------------------------

    async def merge(
        self,
        node: WorkflowNode,
        outputs: Sequence[Any],
        input: Any,
        *,
        publisher: ProgressPublisher | None = None,
    ) -> Outcome:
        """Fan-in: turn branch outputs (collected failures included) into results and merge them."""
        publisher = publisher or self.publisher(node)
        try:
            composite = self.instance_of(node, BaseCompositeAgent)
            branches = await composite.resolve_branches(input=input)
            results: list[BranchResult] = []
            for branch, output in zip(branches, outputs, strict=True):
                failure = BranchFailure.from_wire(output)
                if failure is not None and failure.capture != node.path:
                    return failure  # a failure an outer composite collects
                results.append(
                    BranchResult(key=branch.key, ok=False, error=failure.error)
                    if failure is not None
                    else BranchResult(key=branch.key, ok=True, output=output)
                )
            return await self._merge(node, composite, results, input, publisher)
        finally:
            publisher.flush(final=True)

    async def _merge(
        self,
        node: WorkflowNode,
        composite: BaseCompositeAgent,
        results: list[BranchResult],
        input: Any,
        publisher: ProgressPublisher,
    ) -> Outcome:
        scope, width = self.scope(node), len(results)
        await composite.emit_composite_event(
            scope=scope,
            on_progress=publisher,
            phase="merge",
            status=ProgressStatus.PROGRESS,
            width=width,
            done=width,
        )
        try:
            merged = await maybe_await(composite.merge_results(results=results, input=input))
        except Exception as error:
            await composite.emit_composite_failure(
                scope=scope, on_progress=publisher, width=width, error=error
            )
            publisher.flush(final=True)
            return await self.fail(node, error)
        await composite.emit_composite_event(
            scope=scope,
            on_progress=publisher,
            phase="done",
            status=ProgressStatus.COMPLETED,
            width=width,
            done=width,
        )
        return Done(value=merged)

    # ----- the run's end ------------------------------------------------------------------------

    async def finish(
        self, run_id: str, result: Any, *, owner_token: str | None = None, rounds: BatchRounds | None = None
    ) -> Any:
        """Record the run's end with its ``result`` and return what its task returns: ``succeeded``
        and the result, or ``degraded`` (model failures among its events) and a
        :class:`~agentloop.orchestration.wire.DegradedResult` on the wire, after a last ``degraded`` event.
        The record says how it ended (``stopped_by``: ``"bound"`` when a loop's ``done`` event says
        it hit its bound, else ``"complete"``). A packed batch's run reads its events and ends with
        the other runs' due (``rounds``: ``store/batch_rounds.py``)."""
        if rounds is None:  # the store picks them: a run of many loops reads few rows, if any
            ends = [event for _, event in self.store.run_end_events(run_id)]
        else:
            ends = await rounds.ends(run_id)
        failures, bounded = failures_in(ends), bounded_paths(ends)  # one read for both
        stopped_by = STOPPED_BY_BOUND if bounded else STOPPED_COMPLETE
        if not failures:
            ended: dict[str, Any] = {
                "status": "succeeded",
                "output": result,
                "owner_token": owner_token,
                "stopped_by": stopped_by,
            }
            if rounds is None:
                self.store.finish_run(run_id, **ended)
            else:
                await rounds.end(RunEnd(run_id=run_id, **ended))
            return result
        error, publisher = (
            degradation_error(failures),
            self.publisher(WorkflowNode(run_id=run_id, runnable="")),
        )
        publisher(degraded_event(run_id, self._event_name(run_id), failures))
        publisher.flush(final=True)
        self.store.finish_run(
            run_id,
            status="degraded",
            output=result,
            error=error,
            owner_token=owner_token,
            stopped_by=stopped_by,
        )
        return DegradedResult(output=result, error=error).to_wire()

    def _event_name(self, run_id: str) -> str:
        """The name the run's root runnable gives its events (its class's, as in-process)."""
        name = getattr(self.store.get_run(run_id), "runnable", "")
        runnable = self.registry.get(name).runnable if name in self.registry else None
        return str(getattr(runnable, "runnable_name", "") or getattr(runnable, "__name__", name))

    # ----- failure ----------------------------------------------------------------------------

    async def fail(self, node: WorkflowNode, error: BaseException) -> BranchFailure:
        """Report ``error`` at every enclosing level, as the in-process engine would, up to the
        collecting composite (then return the failure as a value) or up to the root (then record
        the run's end and raise)."""
        if isinstance(error, StoreUnavailableError):
            raise error  # the database is away: the task is tried again, the run goes on
        secrets = sorted({*context_secrets(node.context), *self.secrets()}, key=len, reverse=True)
        error, publisher = scrub_error(error, secrets), self.publisher(node)
        reported = failed_paths(self.store, node.run_id)
        try:
            for ancestor in reversed(node.ancestors):
                # a stop ends the run, as inline; so does a poisoned message, as on RabbitMQ's edge
                collected = not isinstance(error, RunStoppedError | DeliveryLimitError)
                if collected and node.capture is not None and ancestor.path == node.capture:
                    return BranchFailure.of(error, capture=node.capture)
                error = await report_ancestor_failure(
                    self.registry, node.run_id, ancestor, error, publisher, reported
                )
        finally:
            publisher.flush(final=True)
        end_with_failure(self.store, node.run_id, error, owner_token=node.owner_token)
        raise error


def _past_limit(node: WorkflowNode, deliveries: int, limit: int) -> DeliveryLimitError:
    return DeliveryLimitError(
        f"{node.runnable} at {node.path or 'the root'!r} was started {deliveries} times without "
        f"saving a checkpoint (delivery limit {limit}): each task that ran it died or lost its "
        "connection before it ended, so it is not run again"
    )


def _store_away(task: asyncio.Future[Outcome]) -> bool:
    """Whether a packed branch ended because the run store stayed away."""
    return not task.cancelled() and isinstance(task.exception(), StoreUnavailableError)


_UNBUILT = object()


def _spec_key(spec: Any) -> str | None:
    """A context spec as a key: its JSON with sorted keys (``"{}"`` for none; ``None`` for a spec
    that is not JSON, whose context is then built for its branch alone)."""
    if not spec:
        return "{}"
    try:
        return json.dumps(dict(spec), sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return None


def _ends_pack(task: asyncio.Future[Outcome]) -> bool:
    """Whether a packed branch ended with an error that ends the whole pack at once (the run's
    end): not a store away nor a pause, which wait for the other branches to end."""
    if task.cancelled():
        return False
    error = task.exception()
    return error is not None and not isinstance(error, StoreUnavailableError | RunPaused)

"""The Celery tasks of the wire contract (``orchestration/wire.py``), defined at module level.

Each is thin: decode the message, ask the engine (``orchestration/runtime/engine.py``),
and return a value or replace itself with the canvas the outcome compiles to
(``canvas.py``). What a task shares with the others of its app, the settings,
the registry and the run store, comes from the app's
:class:`~agentloop.orchestration.celery_adapter.app.AppDependencies`; :func:`install_tasks`
registers these functions on one app.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Coroutine
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from celery import Celery, Task
from celery.exceptions import Ignore

from agentloop.actions.human import RunPaused
from agentloop.orchestration.celery_adapter.admission import admit_launch, key_of_run, wake_waiters
from agentloop.orchestration.celery_adapter.batch_packs import run_batch_pack
from agentloop.orchestration.celery_adapter.batches import install_batch_tasks
from agentloop.orchestration.celery_adapter.branch_slots import abandon_branch, branch_slot
from agentloop.orchestration.celery_adapter.canvas import (
    continue_lane,
    continue_pack,
    continue_stages,
    continue_with,
    fill_places,
    from_lanes,
)
from agentloop.orchestration.celery_adapter.config import BATCH_PRIORITY
from agentloop.orchestration.celery_adapter.deliveries import first_delivery, node_of, unmark_chain
from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.celery_adapter.event_loops import new_task_loop
from agentloop.orchestration.celery_adapter.outgoing import check_output
from agentloop.orchestration.celery_adapter.pack_policy import leading_stages
from agentloop.orchestration.celery_adapter.pause import (
    RESUME_TASK_OPTIONS,
    pause_task,
    resume,
    resume_settled,
)
from agentloop.orchestration.celery_adapter.progress_events import progress_events_of
from agentloop.orchestration.celery_adapter.run_failures import RUN_TASK_OPTIONS, RUN_TASKS
from agentloop.orchestration.errors import (
    ConcurrencyLimitError,
    LaunchRequestError,
    RunAlreadyEndedError,
    RunIdTakenError,
)
from agentloop.orchestration.fairness.current import running_key
from agentloop.orchestration.packing.rule import JOINED_STAGES_SECONDS
from agentloop.orchestration.redaction import hidden_texts, parameter_names
from agentloop.orchestration.runtime.engine import WorkflowEngine
from agentloop.orchestration.runtime.launches import attached_result, claim_launch
from agentloop.orchestration.runtime.next_step import ChainStages, Done, Outcome, StagesLeft
from agentloop.orchestration.runtime.run_end import end_with_failure
from agentloop.orchestration.runtime.run_gate import RunGate
from agentloop.orchestration.settings.store import age_seconds
from agentloop.orchestration.store import RunRecord, RunStatus
from agentloop.orchestration.store.retention import prune_runs as prune_workflows
from agentloop.orchestration.wire import (
    BATCH_PACK,
    CANCEL,
    FINALIZE,
    LANE,
    LANE_COLLECT,
    LAUNCH,
    MERGE,
    PACK,
    PACK_COLLECT,
    PING,
    PIPELINE_DONE,
    PROGRESS,
    PRUNE_RUNS,
    RESUME,
    RESUME_SETTLED,
    RUN,
    STAGE,
    STAGES,
    WorkflowNode,
    check_name,
    packed_branches,
    progress_page,
    progress_status,
)

T = TypeVar("T")

logger = logging.getLogger(__name__)

_loops = threading.local()
#: The statuses of a run that ended with its result.
_SUCCESSES = frozenset({RunStatus.SUCCEEDED.value, RunStatus.DEGRADED.value})

#: How long a task's latest progress event waits to become its ``PROGRESS`` state (and a
#: ``task-progress`` event): at most two a second, so faster iterations are throttled; a task that
#: ends sooner publishes none (its end follows). A model-paced loop (seconds per call) still shows
#: each iteration in Flower; checkpoints keep their own interval.
PROGRESS_INTERVAL = 0.5
#: How long a task's progress events wait in its buffer to be written to the run store together:
#: a branch of a few model calls writes its events once, with its result, in the same transaction;
#: a longer task writes them at least every second. (Its ``PROGRESS`` state keeps the pace above.)
EVENTS_INTERVAL = 1.0


def run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run the core's coroutine on this thread's event loop (one per worker thread, reused; of the
    kind the worker runs: ``event_loops.py``)."""
    loop: asyncio.AbstractEventLoop | None = getattr(_loops, "loop", None)
    if loop is None or loop.is_closed():
        loop = _loops.loop = new_task_loop()
    return loop.run_until_complete(coroutine)


def engine_for(task: Task, pack: list[str] | None = None) -> WorkflowEngine:
    """The engine of one task: its events go to the run store and the task's ``PROGRESS`` state
    (with the paths of the branches a pack runs, ``pack``, so Flower shows what it runs)."""

    request = task.request  # this thread's: a pack publishes from its threads (ProgressPublisher)

    def publish(event: dict[str, Any]) -> None:
        if request.id and not request.called_directly:
            meta = event if pack is None else {**event, "pack": pack}
            task.backend.store_result(request.id, meta, "PROGRESS", request=request)  # update_state's
            progress_events_of(task.app).send(request, meta)  # one dispatcher per process

    deps = dependencies_of(task.app)
    return WorkflowEngine(
        registry=deps.registry,
        store=deps.store,
        update_state=publish,
        progress_interval=PROGRESS_INTERVAL,
        events_interval=EVENTS_INTERVAL,
        checkpoint_interval=deps.settings.checkpoint_seconds,
        waits=deps.waits,
        tracer=getattr(task.app, "agentloop_tracer", None),  # orchestration/tracing/otel.py
        cache=deps.step_cache,  # orchestration/runtime/step_cache.py
        secrets=functools.cache(lambda: hidden_of(task)),  # the worker's log hides them: so do records
        key_texts=deps.settings.model.key_texts(),  # nor does a recording keep the model's keys
        delivery_limit=deps.settings.delivery_limit,  # every broker's: counted in the run store
    )


#: Arguments a task only carries on for others: a lane's ``collected``, the outputs of the branches
#: before it. Hidden from logs and Flower like any content, but no error of this task's branch can
#: quote them, so its records are not scrubbed of them: a branch failing with the same message as
#: one before it (two branches over one token budget) would otherwise read ``<hidden>``.
CARRIED = frozenset({"collected"})


def hidden_of(task: Task) -> tuple[str, ...]:
    """The texts of ``task``'s hidden arguments (``orchestration/redaction.py``) its errors may quote:
    taken out of what its run records (:data:`CARRIED` aside)."""
    request = task.request
    names = parameter_names(task.run) or ()
    args = [
        None if position < len(names) and names[position] in CARRIED else value
        for position, value in enumerate(request.args or ())
    ]
    kwargs = {name: value for name, value in (request.kwargs or {}).items() if name not in CARRIED}
    return hidden_texts(args, kwargs, names)


def run_node(task: Task, run_id: str, coroutine: Coroutine[Any, Any, T], key: str | None = None) -> T:
    """The engine's outcome for a node (of a run of concurrency key ``key``: its model calls count
    against the key's limits); a node paused for a person's answer ends its task here without a
    result, and runs again when answered (``orchestration/celery_adapter/pause.py``)."""
    try:
        with running_key(key):
            return run_coroutine(coroutine)
    except RunPaused as paused:
        pause_task(task, paused, run_id)
        raise


def launch(
    self: Task,
    runnable: Any = None,
    input: Any = None,
    context: Any = None,
    run_id: Any = None,
    token_budget: Any = None,
    deadline_seconds: Any = None,
    principal: Any = None,
    record: Any = None,
    concurrency_key: Any = None,
    priority: Any = None,
    **unknown: Any,
) -> Any:
    """Start the registered workflow ``runnable``; its final result becomes this task's.

    ``token_budget`` (optional) caps the tokens all steps of the run may use together;
    ``deadline_seconds`` (optional) ends the whole run that long after this task starts it;
    ``principal`` (optional) is recorded as who started it (``agentloop serve`` sets it);
    ``record`` (optional) records the run for ``agentloop replay`` (``AGENTLOOP_RECORD_RUNS``
    records every run); ``concurrency_key`` (optional) is the key the run counts against for
    fair shares and limits (else its runnable's rule's), ``priority`` (optional, 0 first to 9)
    the priority its tasks are sent with (``docs/how-to/fairness.md``).
    The run id (``run_id``, else this task's id) is an idempotency key: see
    :mod:`agentloop.orchestration.runtime.launches` for a message whose id names a run that exists, and for
    one that is malformed (``unknown`` arguments, no ``runnable``): it is refused and recorded.
    """
    deps = dependencies_of(self.app)
    arguments = {"runnable": runnable, "input": input, "context": context, "run_id": run_id}
    arguments.update(token_budget=token_budget, deadline_seconds=deadline_seconds, principal=principal)
    arguments.update(record=record)
    arguments.update(concurrency_key=concurrency_key, priority=priority)
    arguments.update(unknown)
    try:
        claim = claim_launch(deps.store, arguments, task_id=str(self.request.id), registered=deps.registry)
    except RunIdTakenError as taken:
        if not taken.same_task:
            raise
        logger.warning("%s: this message is ignored, and its result is that run's", taken)
        raise Ignore() from taken  # the result backend keeps the run's own result
    if claim.record.is_finished:
        return attached_result(claim.record)  # the same launch again: its outcome, not a second run
    if claim.problem is not None or claim.request is None:  # malformed: the run ends failed with why
        problem = claim.problem or LaunchRequestError("the launch is malformed")
        end_with_failure(deps.store, claim.run_id, problem, owner_token=claim.owner_token)
        raise problem
    request = claim.request
    try:  # a run past its concurrency key's limit waits, unstarted, without a worker slot (or is refused)
        key = admit_launch(self, deps, claim.run_id, request)
    except (ConcurrencyLimitError, LaunchRequestError) as problem:
        end_with_failure(deps.store, claim.run_id, problem, owner_token=claim.owner_token)
        raise
    if not deps.store.mark_running(claim.run_id):  # a twin of this launch ended it meanwhile
        return attached_result(deps.store.get_run(claim.run_id) or claim.record)
    seconds = request.deadline_seconds
    deadline = None if seconds is None else time.time() + seconds  # one epoch time for every task
    node = WorkflowNode(
        run_id=claim.run_id,
        runnable=request.runnable,
        context=request.context,
        deadline=deadline,
        owner_token=claim.owner_token,
        fresh=claim.created and first_delivery(self),  # no task of this run can have run yet
        record=request.record or deps.settings.record_runs,
        concurrency_key=key,
        priority=request.priority,
    )
    engine = engine_for(self)
    engine.record_start(node)
    started = run_node(self, claim.run_id, engine.start(node, request.input), key)
    outcome = stages_here(self, engine, started, key)
    if isinstance(outcome, Done):
        try:
            return finalize(self, outcome.value, claim.run_id, claim.owner_token)
        finally:  # its slot is free: the runs parked under its key that may start now are sent
            wake_waiters(self.app, key)
    then = self.app.signature(FINALIZE, args=(claim.run_id, claim.owner_token))
    return continue_stages(self, outcome, then=then)


def stages_here(
    task: Task, engine: WorkflowEngine, outcome: Outcome, key: str | None
) -> Outcome | StagesLeft:
    """``outcome``, or, for a pipeline, what is left of it once ``task`` ran its first stages
    itself, as the ``agentloop.stages`` task its chain would start with runs them (the rule:
    ``pack_policy.leading_stages``), and closed it when they were all of them: a pipeline of
    cheap stages is one task, not a chain of three."""
    if not isinstance(outcome, ChainStages):
        return outcome
    count = leading_stages(task.app, outcome)
    if not count:
        return outcome
    node, total, carried = outcome.node, outcome.stages, outcome.carried
    run = engine.stages(
        outcome.input,
        node,
        0,
        count,
        carried,
        seconds=JOINED_STAGES_SECONDS,
        hand_on=lambda output: check_output(output, task.name),  # as a chain's next message would be
    )
    left = run_node(task, node.run_id, run, key)
    if isinstance(left, StagesLeft):
        return replace(left, count=total - left.index, pipeline=outcome)
    if not isinstance(left, Done):
        return left  # a failure its composite collects
    if count < total:
        return StagesLeft(
            node=node, previous=left.value, index=count, count=total - count, input=carried, pipeline=outcome
        )
    return run_coroutine(engine.pipeline_done(left.value, node))


def admitted(task: Task, data: Any) -> WorkflowNode:
    """The node ``task`` was sent, when the run gate lets it run (``orchestration/runtime/run_gate.py``):
    a forged or malformed node is refused. A task of a run that has ended runs nothing: after a
    success it is ignored (the run's result stands); after a failure it fails with
    :class:`~agentloop.orchestration.errors.RunAlreadyEndedError`, so the chord or chain it belongs to ends
    as every failure ends it (a chord whose part was ignored would never end)."""
    try:
        node = RunGate(dependencies_of(task.app).store).admit(data)
    except RunAlreadyEndedError as ended:
        logger.info("%s: %s[%s] runs nothing", ended, task.name, task.request.id)
        abandon_branch(task, data)  # its place in its key's line of branch slots holds up nobody
        if ended.record.status in _SUCCESSES:
            raise Ignore() from ended
        raise
    return node_of(task, node)


def run(self: Task, node: dict[str, Any], input: Any = None) -> Any:
    """Run one loop or action stage, or expand one pipeline or composite."""
    work = admitted(self, node)
    with branch_slot(self, work):  # a keyed run's branch past its key's branch limit is parked
        engine, key = engine_for(self), work.concurrency_key
        outcome = run_node(self, work.run_id, engine.start(work, input), key)
        return continue_stages(self, stages_here(self, engine, outcome, key))


def stage(self: Task, previous: Any, node: dict[str, Any], index: int, input: Any = None) -> Any:
    """Stage ``index`` of a pipeline, fed the previous stage's output."""
    work = admitted(self, node)
    with branch_slot(self, work):
        engine, key = engine_for(self), work.concurrency_key
        outcome = run_node(self, work.run_id, engine.stage(previous, work, int(index), input), key)
        return continue_stages(self, stages_here(self, engine, outcome, key))


def stages(self: Task, previous: Any, node: dict[str, Any], index: int, count: int, input: Any = None) -> Any:
    """Stages ``index`` to ``index + count - 1`` of a pipeline, one after another, fed the previous
    stage's output; each recorded as it ends (``docs/how-to/packing.md#pipelines``). The stages
    left after :data:`~agentloop.orchestration.packing.rule.JOINED_STAGES_SECONDS` go on in a task
    of their own."""
    work = admitted(self, node)
    with branch_slot(self, work):
        engine = engine_for(self)
        run = engine.stages(
            previous,
            work,
            int(index),
            int(count),
            input,
            seconds=JOINED_STAGES_SECONDS,
            hand_on=lambda output: check_output(output, self.name),  # as a chain's next message would be
        )
        return continue_stages(self, run_node(self, work.run_id, run, work.concurrency_key))


def pipeline_done(self: Task, previous: Any, node: dict[str, Any]) -> Any:
    """Close a pipeline: its result is the last stage's output."""
    return continue_with(self, run_coroutine(engine_for(self).pipeline_done(previous, admitted(self, node))))


def merge(
    self: Task,
    outputs: Any,
    node: dict[str, Any],
    input: Any = None,
    single: bool = False,
    lanes: int = 0,
    packed: bool = False,
) -> Any:
    """Fan-in of a composite: merge its branches' outputs (from ``lanes`` lanes, when bounded;
    from packs' lists, ``packed``, in order)."""
    work = admitted(self, node)
    outputs = [outputs] if single else list(outputs)
    if lanes:
        outputs = from_lanes(outputs)
    elif packed:
        outputs = [output for step in outputs for output in step]
    return continue_with(self, run_coroutine(engine_for(self).merge(work, outputs, input)))


def lane(self: Task, collected: list[Any], node: dict[str, Any], input: Any = None) -> Any:
    """One branch of a composite run in a lane, after the lane's branches before it."""
    work = admitted(self, node)
    with branch_slot(self, work):
        outcome = run_node(self, work.run_id, engine_for(self).start(work, input), work.concurrency_key)
        return continue_lane(self, outcome, list(collected))


def pack(
    self: Task,
    collected: list[Any],
    node: dict[str, Any],
    branches: list[Any],
    width: int = 0,
    fail_fast: bool = True,
) -> list[Any]:
    """Several loop branches of the composite ``node`` (``branches``: ``[runnable, key, input]``
    each, of ``width`` in all) run together on this task's event loop; the outputs collected
    before them with theirs appended (``docs/how-to/packing.md``)."""
    work = admitted(self, node)
    nodes, inputs = [], []
    for runnable, key, value in packed_branches(branches):
        nodes.append(WorkflowEngine.branch_node(work, runnable, key, int(width), bool(fail_fast)))
        inputs.append(value)
    paths = [child.path for child in nodes]
    with branch_slot(self, work, pack=paths):  # a keyed run's pack takes its branches' slots at once
        engine = engine_for(self, pack=paths)
        outcomes = run_node(self, work.run_id, engine.start_pack(nodes, inputs), work.concurrency_key)
        return continue_pack(self, outcomes, list(collected))


def pack_collect(
    self: Task, lanes: Any, result: list[Any], places: list[int], single: bool = False
) -> list[Any]:
    """A pack's outputs (``result``) with those of the branches that left it to wait for a person
    (one lane each, in ``lanes``) in their ``places``."""
    return fill_places([lanes] if single else list(lanes), list(result), [int(place) for place in places])


def batch_pack(self: Task, launches: list[Any]) -> dict[str, int]:
    """Runs of one batch chunk (``launches``: each a launch's keyword arguments) run together on
    this task's event loop, each its own run (``celery_adapter/batch_packs.py``)."""
    if not isinstance(launches, list) or not all(isinstance(kwargs, dict) for kwargs in launches):
        raise LaunchRequestError("agentloop.batch_pack takes a list of launches' keyword arguments")
    engine = engine_for(self)
    fresh = first_delivery(self)
    return run_batch_pack(self, engine, launches, fresh=fresh, priority=BATCH_PRIORITY, run=run_coroutine)


def lane_collect(self: Task, output: Any, collected: list[Any]) -> list[Any]:
    """Add the output of a lane's branch that expanded into a canvas to the lane's outputs."""
    if not first_delivery(self):
        unmark_chain(self)  # the lane's next branch may be sent twice: it must read the store
    return [*collected, output]


def finalize(self: Task, result: Any, run_id: str, owner_token: str | None = None) -> Any:
    """Record the run's end (``succeeded``, or ``degraded`` when model calls failed); the run's id
    then answers with its result (a degraded run's as a
    :class:`~agentloop.orchestration.wire.DegradedResult`).

    Only the canvas its launch built carries the run's ``owner_token``: a finalize without it
    is refused (:class:`~agentloop.orchestration.errors.RunOwnershipError`) and the run is not touched.
    """
    RunGate(dependencies_of(self.app).store).check_owner(str(run_id), owner_token)
    try:
        return run_coroutine(engine_for(self).finish(run_id, result, owner_token=owner_token))
    except RunAlreadyEndedError as ended:
        return attached_result(ended.record)  # a twin of this launch (a redelivery) ended it first
    finally:  # a keyed run's slot is free: the runs parked under its key that may start now are sent
        if not self.request.called_directly and self.name == FINALIZE:
            wake_waiters(self.app, key_of_run(self.app, str(run_id)))


def progress(self: Task, run_id: str, after_id: int = 0, limit: int = 500) -> dict[str, Any]:
    """A run's status and its events after ``after_id``, for clients that import only Celery.

    An id no run can have (empty, not a string, too long, with a NUL: what ``check_name``
    refuses at launch) is ``not_found``, like an id nothing is known of."""
    store = dependencies_of(self.app).store
    first, size = progress_page(after_id, limit)
    try:
        check_name(run_id, "run_id")
    except LaunchRequestError:
        record, rows, launch_state = None, [], None
    else:
        record = store.get_run(run_id)
        rows = store.events(run_id, after_id=first, limit=size)
        # without a record, the launch's state in the result backend tells "pending" from "not_found"
        launch_state = None if record is not None else self.app.backend.get_state(run_id)
    return {
        "run_id": run_id,
        "status": progress_status(record.status if record is not None else None, launch_state),
        "error": record.error if record is not None else None,
        "usage": usage_of(record) if record is not None else None,
        "events": [event for _, event in rows],
        "last_id": rows[-1][0] if rows else first,
    }


def usage_of(record: RunRecord) -> dict[str, int]:
    """A run's usage on the progress page (:meth:`RunRecord.usage`)."""
    return record.usage()


def cancel(self: Task, run_id: str) -> bool:
    """Ask every task of the run to stop at its next step."""
    dependencies_of(self.app).store.request_cancel(str(run_id))
    return True


def prune_runs(self: Task, older_than: Any = None, dry_run: bool = False) -> dict[str, Any]:
    """Delete (``dry_run``: count) the workflows that ended more than ``older_than`` ago (an age:
    seconds or ``30d``; default ``AGENTLOOP_RUN_RETENTION``); beat sends it hourly when that is set."""
    deps = dependencies_of(self.app)
    age = older_than if older_than is not None else deps.settings.store.retention_seconds
    if age is None:
        return {"pruned": False, "reason": "AGENTLOOP_RUN_RETENTION is not set"}
    before = datetime.now(UTC) - timedelta(seconds=age_seconds(age, "older_than"))
    pruned = prune_workflows(deps.store, before=before, dry_run=bool(dry_run), waits=deps.waits)
    logger.info(
        "Pruned %d workflows that ended before %s: %d runs, %d events%s",
        pruned.workflows, before.isoformat(), pruned.runs, pruned.events, " (dry run)" if dry_run else "",
    )  # fmt: skip
    return {"pruned": True, "before": before.isoformat(), **pruned.to_dict()}


def ping() -> str:
    """Health check: answers ``"pong"`` as soon as a worker takes it."""
    return "pong"


#: The tasks whose ids only the framework's own canvases hold (never a client's): each writes no
#: ``STARTED`` state to the result backend, which nothing reads (Flower shows a task started from
#: its ``task-started`` event, and a run's state is in the run store), saving two Redis round trips
#: a task. The tasks a client sends (launch, progress, cancel, resume) keep ``STARTED``.
INTERNAL_TASKS = frozenset(
    {RUN, STAGE, STAGES, PIPELINE_DONE, MERGE, LANE, LANE_COLLECT, PACK, BATCH_PACK, PACK_COLLECT, FINALIZE}
)

#: Each task of the contract and the function that runs it.
TASKS = {
    LAUNCH: launch,
    RUN: run,
    STAGE: stage,
    STAGES: stages,
    PIPELINE_DONE: pipeline_done,
    MERGE: merge,
    LANE: lane,
    LANE_COLLECT: lane_collect,
    PACK: pack,
    BATCH_PACK: batch_pack,
    PACK_COLLECT: pack_collect,
    FINALIZE: finalize,
    PROGRESS: progress,
    CANCEL: cancel,
    RESUME: resume,
    RESUME_SETTLED: resume_settled,
    PRUNE_RUNS: prune_runs,
}


def install_tasks(app: Celery) -> None:
    """Register the framework's tasks on ``app`` (and only on it)."""
    from agentloop.orchestration.celery_adapter.privacy import install_privacy

    install_privacy(app)  # agentloop.* arguments and results hidden from Flower and worker logs
    for name, function in TASKS.items():
        options = RUN_TASK_OPTIONS if name in RUN_TASKS else {}  # retried, and the run ended on failure
        if name == BATCH_PACK:  # retried while the store is away; each run records its own end
            options = {key: value for key, value in RUN_TASK_OPTIONS.items() if key != "on_failure"}
        if name in (RESUME, RESUME_SETTLED):
            options = RESUME_TASK_OPTIONS  # retried until the settled answer has sent the run on
        if name in INTERNAL_TASKS:
            options = {**options, "track_started": False}
        app.task(name=name, bind=True, shared=False, **options)(function)
    install_batch_tasks(app)
    app.task(name=PING, shared=False)(ping)

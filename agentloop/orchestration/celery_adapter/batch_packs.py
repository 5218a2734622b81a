"""Packed batches: the runs of a batch chunk launched together, on one event loop, in one task.

``agentloop.batch_chunk`` records one run per input, as before; when the packing rule allows it
(the runnable is a loop or an action stage whose work is a coroutine, and the deployment packs:
``orchestration/packing/rule.py``, ``pack_policy.py``), it sends one ``agentloop.batch_pack``
per pack of those runs instead of one ``agentloop.launch`` per run. The pack runs each as the
launch would: the same claim of its run id (so a launch of the same run, or the pack delivered
again, goes on or attaches instead of starting a second run), its own record, status, events,
result (also written to the result backend under the run's id, where a launch's result would
be) and failure. A run paused for a person's answer leaves the pack: its wait is recorded with
its own ``agentloop.launch`` as the message the answer sends, so the pack goes on with its other
runs and ends, and the answered run resumes alone from its checkpoint (several runs of one pack
may wait at once, each for its own answer). A run
store that stays away is raised once every other run has ended: Celery tries the pack again, and
it runs only the runs that have not ended.

The runs make their store steps together: each step (the claim, which reads the run the chunk
recorded, the start, the loop's start and result, the read the run's end is judged on, the end)
waits for the end of the event loop's round and is made for every run due then with one bulk
call (``store/batch_rounds.py``); a run goes on only once its own step is recorded. The pack's
results go to the result backend together at its end (``pack_results.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from celery import Task, states

from agentloop.actions.human import RunPaused
from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.celery_adapter.pack_policy import this_deployment
from agentloop.orchestration.celery_adapter.pack_results import store_results
from agentloop.orchestration.celery_adapter.pause import record_pause
from agentloop.orchestration.celery_adapter.wire_versions import app_wire_version
from agentloop.orchestration.errors import (
    LaunchRequestError,
    RunAlreadyEndedError,
    RunIdTakenError,
    StoreUnavailableError,
)
from agentloop.orchestration.packing.rule import why_not_packed
from agentloop.orchestration.packing.threads import pack_threads
from agentloop.orchestration.runtime.engine import WorkflowEngine
from agentloop.orchestration.runtime.launches import (
    LaunchClaim,
    attached_result,
    claim_launch,
    claim_recorded,
)
from agentloop.orchestration.runtime.next_step import Done
from agentloop.orchestration.runtime.run_end import end_with_failure
from agentloop.orchestration.store import RunRecord
from agentloop.orchestration.store.base import END_PHASES
from agentloop.orchestration.store.batch_rounds import BatchRounds
from agentloop.orchestration.store.bulk import BulkRunStoreBase
from agentloop.orchestration.store.seams import StoreCancelSignal
from agentloop.orchestration.wire import LAUNCH, PACK_WIRE_VERSION, WorkflowNode
from agentloop.pipelines.composite import BaseCompositeAgent
from agentloop.pipelines.pipeline import BaseAgentPipeline

__all__ = ["batch_pack_size", "run_batch_pack"]

logger = logging.getLogger(__name__)


def batch_pack_size(task: Task, runnable: str, chunk: int) -> int:
    """How many of a chunk's runs of ``runnable`` go to one ``agentloop.batch_pack`` (1: one
    launch each): ``AGENTLOOP_PACK_SIZE`` when set, else the whole chunk where the rule packs; a
    pipeline or a composite is never packed (it expands into tasks of its own)."""
    deps = dependencies_of(task.app)
    registered = deps.registry.get(runnable).runnable
    chosen = deps.settings.pack_size
    if app_wire_version(task.app) < PACK_WIRE_VERSION or chosen == 1:
        return 1
    if not isinstance(deps.store, BulkRunStoreBase):  # a store without bulk steps (store/bulk.py)
        return 1
    if isinstance(registered, type) and issubclass(registered, BaseAgentPipeline | BaseCompositeAgent):
        return 1
    if chosen is not None:
        return chosen
    if why_not_packed(registered) is not None or not this_deployment(task.app).allowed:
        return 1
    return max(1, chunk)


async def _claim(
    task: Task, rounds: BatchRounds, kwargs: dict[str, Any], run_id: str
) -> tuple[LaunchClaim, RunRecord | None]:
    """A packed run's claim, as ``agentloop.launch`` makes it: read with the other runs' (the
    chunk recorded each run, owned by its launch; the record read is returned too), or inserted
    where no run has the id (a pack that was sent by hand)."""
    deps = dependencies_of(task.app)
    found = await rounds.claim(run_id)
    if found is None:
        return claim_launch(deps.store, kwargs, task_id=run_id, registered=deps.registry), None
    record, owner = found
    return claim_recorded(
        kwargs, task_id=run_id, registered=deps.registry, record=record, owner=owner
    ), record


async def _one(
    task: Task,
    engine: WorkflowEngine,
    rounds: BatchRounds,
    kwargs: dict[str, Any],
    fresh: bool,
    priority: int,
) -> tuple[str, Any]:
    """One run of the pack, as ``agentloop.launch`` runs it, each store step made with the other
    runs' due (``rounds``): ``(how, value)``, ``how`` one of ``done``, ``failed``, ``paused``,
    ``ended`` (before this delivery; the value is its record) or ``skipped`` (another launch owns
    it, or a twin ended it)."""
    deps = dependencies_of(task.app)
    run_id = str(kwargs["run_id"])
    try:
        claim, read = await _claim(task, rounds, kwargs, run_id)
    except RunIdTakenError as taken:
        logger.warning("%s: this packed run is left to its owner", taken)
        return "skipped", None
    if claim.record.is_finished:  # a pack delivered again: its result, where the first left none
        return "ended", claim.record
    if claim.request is None or claim.problem is not None:
        problem = claim.problem or LaunchRequestError("the launch is malformed")
        end_with_failure(deps.store, run_id, problem, owner_token=claim.owner_token)
        return "skipped", None
    request = claim.request
    if not await rounds.mark_running(run_id):
        return "skipped", None
    node = WorkflowNode(
        run_id=run_id,
        runnable=request.runnable,
        context=request.context,
        owner_token=claim.owner_token,
        fresh=claim.created and fresh,
        record=request.record or deps.settings.record_runs,
    )
    engine.record_start(node)
    # A run that had not started when it was claimed holds no events: its end asks nothing more.
    unstarted = claim.created if read is None else read.started_at is None
    publisher = engine.publisher(node, stored_failures=False if unstarted else None)
    try:
        record = await rounds.start_loop((run_id, node.path))
        if read is not None and read.root_run_id == read.id:  # its cancel flag came with its claim
            StoreCancelSignal.remember(deps.store, run_id, read.cancel_requested)
        writes = rounds.writes(run_id, publisher)
        outcome = await engine.start(node, request.input, publisher, writes, record)
    except RunPaused as paused:  # it leaves the pack: its own launch is what the answer sends
        launch = task.app.signature(LAUNCH, kwargs=kwargs, task_id=run_id, priority=priority)
        record_pause(task, paused, run_id, dict(launch))
        return "paused", None
    except StoreUnavailableError:
        raise
    except Exception as error:  # the engine recorded the run's end (``WorkflowEngine.fail``)
        return "failed", error
    finally:
        publisher.flush(final=True)
    if not isinstance(outcome, Done):  # the rule packs only loops and stages, which never expand
        expanded = RuntimeError(f"{request.runnable} expanded into tasks inside a batch pack")
        end_with_failure(deps.store, run_id, expanded, owner_token=claim.owner_token)
        return "failed", expanded
    try:
        value = await engine.finish(run_id, outcome.value, owner_token=claim.owner_token, rounds=rounds)
    except RunAlreadyEndedError:
        return "skipped", None
    return "done", value


#: What each run of a pack came to: ``(how, value)``, or what its coroutine raised.
Outcomes = list[tuple[str, Any] | BaseException]


async def _all(
    task: Task, engine: WorkflowEngine, launches: Sequence[dict[str, Any]], fresh: bool, priority: int
) -> Outcomes:
    rounds = BatchRounds(dependencies_of(task.app).store, end_phases=END_PHASES)
    seen: set[str] = set()
    runs = []
    for kwargs in launches:
        run_id = str(kwargs["run_id"])
        # a run id twice in one pack (sent by hand): the first copy runs it, the second is its twin
        runs.append(_one(task, engine, rounds, kwargs, fresh, priority) if run_id not in seen else _twin())
        seen.add(run_id)
    with pack_threads():  # plain-function work runs off the loop (packing/threads.py)
        return await asyncio.gather(*runs, return_exceptions=True)


async def _twin() -> tuple[str, Any]:
    """A second copy of a run in one pack: skipped (its first copy runs it)."""
    return "skipped", None


def run_batch_pack(
    task: Task,
    engine: WorkflowEngine,
    launches: Sequence[dict[str, Any]],
    *,
    fresh: bool,
    priority: int,
    run: Callable[[Coroutine[Any, Any, Outcomes]], Outcomes],
) -> dict[str, int]:
    """Run the ``launches`` (each a launch's keyword arguments, its ``run_id`` given) together
    on the task's event loop (``run``; the module doc); returns how many ended each way."""
    outcomes = run(_all(task, engine, launches, fresh, priority))
    counts = {"done": 0, "failed": 0, "paused": 0, "skipped": 0}
    away: BaseException | None = None
    results: list[tuple[str, Any, str]] = []
    ended: set[str] = set()
    for kwargs, outcome in zip(launches, outcomes, strict=True):
        run_id = str(kwargs["run_id"])
        if isinstance(outcome, BaseException):
            away = away or outcome  # the store stayed away (or worse): the pack is tried again
            continue
        how, value = outcome
        if how == "ended":  # ended before this delivery: its result, unless the backend has one
            counts["skipped"] += 1
            ended.add(run_id)
            try:
                results.append((run_id, attached_result(value), states.SUCCESS))
            except RunAlreadyEndedError as failed:
                results.append((run_id, failed, states.FAILURE))
            continue
        counts[how] += 1
        if how in ("done", "failed"):
            results.append((run_id, value, states.SUCCESS if how == "done" else states.FAILURE))
    store_results(task.backend, results, missing_only=ended)  # together (pack_results.py)
    if away is not None:
        raise away
    return counts

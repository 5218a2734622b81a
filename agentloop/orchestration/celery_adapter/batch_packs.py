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
from agentloop.orchestration.runtime.launches import claim_launch
from agentloop.orchestration.runtime.next_step import Done
from agentloop.orchestration.runtime.run_end import end_with_failure
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
    if isinstance(registered, type) and issubclass(registered, BaseAgentPipeline | BaseCompositeAgent):
        return 1
    if chosen is not None:
        return chosen
    if why_not_packed(registered) is not None or not this_deployment(task.app).allowed:
        return 1
    return max(1, chunk)


async def _one(
    task: Task, engine: WorkflowEngine, kwargs: dict[str, Any], fresh: bool, priority: int
) -> tuple[str, Any]:
    """One run of the pack, as ``agentloop.launch`` runs it: ``(how, value)``, ``how`` one of
    ``done``, ``failed``, ``paused``, ``skipped`` (another launch owns it, or it ended)."""
    deps = dependencies_of(task.app)
    run_id = str(kwargs["run_id"])
    try:
        claim = claim_launch(deps.store, kwargs, task_id=run_id, registered=deps.registry)
    except RunIdTakenError as taken:
        logger.warning("%s: this packed run is left to its owner", taken)
        return "skipped", None
    if claim.record.is_finished or claim.request is None or claim.problem is not None:
        if not claim.record.is_finished:
            problem = claim.problem or LaunchRequestError("the launch is malformed")
            end_with_failure(deps.store, run_id, problem, owner_token=claim.owner_token)
        return "skipped", None
    request = claim.request
    if not deps.store.mark_running(run_id):
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
    try:
        outcome = await engine.start(node, request.input)
    except RunPaused as paused:  # it leaves the pack: its own launch is what the answer sends
        launch = task.app.signature(LAUNCH, kwargs=kwargs, task_id=run_id, priority=priority)
        record_pause(task, paused, run_id, dict(launch))
        return "paused", None
    except StoreUnavailableError:
        raise
    except Exception as error:  # the engine recorded the run's end (``WorkflowEngine.fail``)
        return "failed", error
    if not isinstance(outcome, Done):  # the rule packs only loops and stages, which never expand
        expanded = RuntimeError(f"{request.runnable} expanded into tasks inside a batch pack")
        end_with_failure(deps.store, run_id, expanded, owner_token=claim.owner_token)
        return "failed", expanded
    try:
        return "done", await engine.finish(run_id, outcome.value, owner_token=claim.owner_token)
    except RunAlreadyEndedError:
        return "skipped", None


#: What each run of a pack came to: ``(how, value)``, or what its coroutine raised.
Outcomes = list[tuple[str, Any] | BaseException]


async def _all(
    task: Task, engine: WorkflowEngine, launches: Sequence[dict[str, Any]], fresh: bool, priority: int
) -> Outcomes:
    with pack_threads():  # plain-function work runs off the loop (packing/threads.py)
        runs = (_one(task, engine, kwargs, fresh, priority) for kwargs in launches)
        return await asyncio.gather(*runs, return_exceptions=True)


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
    for kwargs, outcome in zip(launches, outcomes, strict=True):
        run_id = str(kwargs["run_id"])
        if isinstance(outcome, BaseException):
            away = away or outcome  # the store stayed away (or worse): the pack is tried again
            continue
        how, value = outcome
        counts[how] += 1
        if how == "done":
            task.backend.store_result(run_id, value, states.SUCCESS)
        elif how == "failed":
            task.backend.store_result(run_id, value, states.FAILURE)
    if away is not None:
        raise away
    return counts

"""What the tasks of a run do when they fail: try again while the run store is away, and end the
run by whichever path can still reach the store.

Every task that carries a run (:data:`RUN_TASKS`) is registered with
:data:`RUN_TASK_OPTIONS`:

* a :class:`~agentloop.orchestration.errors.StoreUnavailableError` (the database stayed
  away past the store's own retries, ``AGENTLOOP_STORE_RETRY_SECONDS``) retries
  the task, up to :data:`MAX_STORE_RETRIES` times with a delay growing from 5 s
  to 60 s (with the store's own retries, some 18 minutes by default): the
  message comes back with the same task id and arguments, so a launch claims
  its own run again and a loop resumes from its checkpoint;
* a task that fails for good ends with :func:`end_run_on_failure`, Celery's
  ``on_failure``: the run ends ``failed`` with the error unless something
  recorded its end already (the engine does for a failing step; a task can also
  fail outside it, e.g. when a loop's result cannot be stored, or after its last
  retry). A launch whose run was never created creates it first. A task that
  does not hold the run's owner token (a forged one) ends nothing. A task
  killed at its hard time limit is ended so by the worker's main process, which
  keeps no database connection open after it (it forks the pool's next children,
  and every engine is fork safe: ``orchestration/store/database.py``).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any

from celery import Task
from celery.exceptions import TimeLimitExceeded

from agentloop.orchestration.celery_adapter.admission import key_of_ended_launch, key_of_run, wake_waiters
from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.errors import LaunchRequestError, RunIdTakenError, StoreUnavailableError
from agentloop.orchestration.redaction import hidden_texts, parameter_names, scrub_error
from agentloop.orchestration.runtime.launches import claim_launch
from agentloop.orchestration.runtime.run_end import end_with_failure
from agentloop.orchestration.store import RunStore
from agentloop.orchestration.wire import (
    FINALIZE,
    LANE,
    LAUNCH,
    MERGE,
    PACK,
    PIPELINE_DONE,
    RUN,
    STAGE,
    STAGES,
)

__all__ = [
    "MAX_STORE_RETRIES",
    "RUN_TASKS",
    "RUN_TASK_OPTIONS",
    "end_run_of_message",
    "end_run_on_failure",
    "hard_time_limit_error",
]

logger = logging.getLogger(__name__)

#: How many times a task is sent again after the run store stayed away past its retries.
MAX_STORE_RETRIES = 10

#: The tasks that carry a run: the launch, every step of its canvas, and its finalize.
RUN_TASKS = frozenset({LAUNCH, RUN, STAGE, STAGES, PIPELINE_DONE, MERGE, LANE, PACK, FINALIZE})


def _arguments(task: Task, args: Any, kwargs: Any) -> dict[str, Any] | None:
    """The task's arguments by parameter name, ``None`` when they do not fit its signature."""
    try:
        bound = inspect.signature(task.run).bind(*(args or ()), **(kwargs or {}))
    except (TypeError, ValueError):
        return None
    arguments = dict(bound.arguments)
    for name, parameter in bound.signature.parameters.items():
        if parameter.kind is parameter.VAR_KEYWORD:  # the launch's unknown arguments, as sent
            arguments.update(arguments.pop(name, {}))
    return arguments


def end_run_on_failure(
    task: Task, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any
) -> None:
    """Celery's ``on_failure`` for :data:`RUN_TASKS`: end the task's run with ``exc`` unless it has ended.

    A task killed at its hard time limit is ended by the worker's main process (Celery calls
    ``on_failure`` there: the pool child is dead), ``failed`` with a reason that says so; that
    process forks the next pool children, so it keeps no database connection afterwards.
    """
    arguments = _arguments(task, args, kwargs)
    if arguments is None:
        return
    dependencies = dependencies_of(task.app)
    killed = isinstance(exc, TimeLimitExceeded)
    # what is recorded of the error is what the worker's log shows: without the hidden arguments'
    scrub_error(exc, hidden_texts(args, kwargs, parameter_names(task.run)))
    try:
        _end_run(task, dependencies.store, hard_time_limit_error(exc) if killed else exc, task_id, arguments)
    finally:
        if killed:
            dependencies.release_connections()


def end_run_of_message(
    task: Task, store: RunStore, exc: BaseException, task_id: str, args: Any, kwargs: Any
) -> None:
    """End the run of a message of ``task`` that was never run (past its delivery limit) with
    ``exc``, in ``store``, the way :func:`end_run_on_failure` would have; a store out of reach
    raises (the message is then kept, or dead-lettered: ``edge_consumer.py``)."""
    arguments = _arguments(task, args, kwargs)
    if arguments is not None:
        _end_run(task, store, exc, task_id, arguments, swallow=False)


def hard_time_limit_error(exc: BaseException) -> TimeLimitExceeded:
    """The error a run killed at its task's hard time limit ends with: Celery's says only the seconds."""
    seconds = exc.args[0] if exc.args else "?"
    return TimeLimitExceeded(
        f"the task passed its hard time limit ({seconds} s) and its worker process was killed"
    )


def _end_run(
    task: Task,
    store: RunStore,
    exc: BaseException,
    task_id: str,
    arguments: dict[str, Any],
    *,
    swallow: bool = True,
) -> None:
    try:
        _end_failed_run(task, store, exc, task_id, arguments, swallow=swallow)
    finally:  # a keyed run that ended frees its slot: the runs parked under its key may start
        _wake_after(task, task_id, arguments)


def _wake_after(task: Task, task_id: str, arguments: dict[str, Any]) -> None:
    """Send the runs parked under the key of the failed task's run that may start now."""
    try:
        if task.name == LAUNCH:
            given = arguments.get("run_id")
            run_id = str(given) if isinstance(given, str | int) and given != "" else str(task_id)
            key = key_of_ended_launch(task.app, run_id, arguments)
        elif task.name == FINALIZE:
            ended = arguments.get("run_id")
            key = key_of_run(task.app, ended) if isinstance(ended, str) else None
        else:
            node = arguments.get("node")
            key = node.get("concurrency_key") if isinstance(node, Mapping) else None
        wake_waiters(task.app, key if isinstance(key, str) else None)
    except Exception:  # the store is away: the parked runs' backstops ask on their own
        logger.warning("the runs parked behind the run of task %s were not woken", task_id, exc_info=True)


def _end_failed_run(
    task: Task,
    store: RunStore,
    exc: BaseException,
    task_id: str,
    arguments: dict[str, Any],
    *,
    swallow: bool,
) -> None:
    if task.name == LAUNCH:
        try:
            registered = dependencies_of(task.app).registry
            claim = claim_launch(store, arguments, task_id=str(task_id), registered=registered)
        except (LaunchRequestError, RunIdTakenError):  # an id no run can have, or another launch's run
            return
        except Exception:  # the store still away
            if not swallow:
                raise
            logger.error("launch %s failed and its run could not be recorded", task_id, exc_info=True)
            return
        run_id, token = (None, None) if claim.record.is_finished else (claim.run_id, claim.owner_token)
    else:
        node = arguments.get("node")
        carrier = node if isinstance(node, Mapping) else arguments
        run_id, token = carrier.get("run_id"), carrier.get("owner_token")
    if isinstance(run_id, str) and (token is None or isinstance(token, str)):
        try:
            end_with_failure(store, run_id, exc, owner_token=token)
        except Exception:  # the store is still away: nothing more can be done from here
            if not swallow:
                raise
            logger.error("run %s failed and its end could not be recorded", run_id, exc_info=True)


#: The options :func:`~agentloop.orchestration.celery_adapter.tasks.install_tasks` registers each of
#: :data:`RUN_TASKS` with (Celery's documented task options).
RUN_TASK_OPTIONS: dict[str, Any] = {
    "autoretry_for": (StoreUnavailableError,),
    "max_retries": MAX_STORE_RETRIES,
    "retry_backoff": 5,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "on_failure": end_run_on_failure,
}

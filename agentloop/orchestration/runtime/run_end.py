"""How a failed run's end is recorded, by whichever path can still reach the run store.

The task whose step failed records the end (:meth:`WorkflowEngine.fail
<orchestration.runtime.engine.WorkflowEngine.fail>`). When the database stays away past
the store's retries, :func:`end_with_failure` raises
:class:`~agentloop.orchestration.errors.StoreUnavailableError`, and the task is tried
again later (``celery_adapter/run_failures.py``): a step's failure is recorded
once the store is back, never lost. A task that fails without reaching the
engine's recording is ended by its Celery ``on_failure``. Neither rewrites a
run that ended meanwhile, nor ends a run for a task without its owner's token.

Every run ends with one terminal event of its root. A run ended from outside its root's code (a
task killed at its hard time limit, a loop past its delivery limit, a task that failed before
reaching the engine) has none yet: :func:`end_with_failure` writes the root's ``failed`` event
first and the status after, so a process that dies between the two leaves a run whose next try
ends it and finds the event there (never two, never none).
"""

from __future__ import annotations

import logging
from typing import Any

from agentloop.actions.errors import BranchFailedError, RunStoppedError
from agentloop.loops.contract import ProgressCallback
from agentloop.loops.progress import ProgressEvent, ProgressStatus
from agentloop.loops.scope import RunScope
from agentloop.orchestration.errors import RunAlreadyEndedError, RunOwnershipError, StoreUnavailableError
from agentloop.orchestration.interruptions import reraise_interruption
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import TERMINAL_STATUSES, RunStatus, RunStore
from agentloop.orchestration.wire import Ancestor

__all__ = ["end_with_failure", "failed_paths", "failure_status", "report_ancestor_failure"]

logger = logging.getLogger(__name__)


def failure_status(error: BaseException) -> str:
    """The run's final status for the error that ended it (``failed`` unless it says otherwise)."""
    status = str(getattr(error, "status", RunStatus.FAILED.value))
    return status if status in TERMINAL_STATUSES else RunStatus.FAILED.value


def end_with_failure(store: RunStore, run_id: str, error: BaseException, *, owner_token: str | None) -> bool:
    """Record ``error`` as the end of run ``run_id``; ``True`` when the run has ended now or before.

    A run that ended meanwhile is left as it is; a caller that does not own the
    run is refused (``False``, logged), and so is any other failure to record
    but one: a store that stayed unreachable raises
    :class:`~agentloop.orchestration.errors.StoreUnavailableError`, for the task to be tried again.
    """
    try:
        _report_root_failure(store, run_id, error, owner_token)
        store.finish_run(
            run_id,
            status=failure_status(error),
            error={"type": type(error).__name__, "message": str(error)},
            owner_token=owner_token,
        )
    except RunAlreadyEndedError:
        return True
    except RunOwnershipError:
        logger.warning("run %s was not ended: the failing task does not own it", run_id)
        return False
    except StoreUnavailableError:
        raise
    except Exception as error:
        reraise_interruption(error)
        logger.warning("could not record the end of run %s", run_id, exc_info=True)
        return False
    return True


def _report_root_failure(store: RunStore, run_id: str, error: BaseException, owner_token: str | None) -> None:
    """Write the root's ``failed`` event of a run still going whose root reported none (module doc);
    nothing for a run that ended, or for a task that does not hold the run's owner token."""
    record = store.get_run(run_id)
    if record is None or record.is_finished:
        return
    owner = store.run_owner(run_id)
    if owner is not None and not owner.holds(owner_token):
        return  # finish_run refuses it too: a forged task writes nothing
    if "" in failed_paths(store, run_id):
        return
    event = ProgressEvent(
        run_id=run_id,
        path="",
        runnable=record.runnable,
        iteration=0,
        max_iterations=0,
        phase="run",
        status=ProgressStatus.FAILED,
        message=f"{type(error).__name__}: {error}",
        data={"error": {"type": type(error).__name__, "message": str(error)}},
    )
    store.append_events(run_id, [event.to_dict()])


def failed_paths(store: RunStore, run_id: str) -> set[str]:
    """The paths whose ``failed`` event the run has recorded (none, when the store cannot say)."""
    try:
        return {e["path"] for _, e in store.events(run_id, status="failed")}
    except Exception as error:  # unreachable: report every level again rather than stop here
        reraise_interruption(error)
        logger.warning("could not read the events of run %s", run_id, exc_info=True)
        return set()


async def report_ancestor_failure(
    registry: RunnableRegistry,
    run_id: str,
    ancestor: Ancestor,
    error: BaseException,
    publisher: ProgressCallback,
    reported: set[str],
) -> BaseException:
    """The enclosing ``ancestor`` emits its ``failed`` event (once per path: ``reported``);
    returns the error it passes up (a composite's wrapped in :class:`~actions.BranchFailedError`)."""
    if ancestor.kind == "composite" and not isinstance(error, RunStoppedError):
        error = BranchFailedError(ancestor.position, error)
    if ancestor.path in reported:
        return error
    reported.add(ancestor.path)
    # A failure event needs the class only (its name, its stages), never the context: the
    # instance is built without one, so a failing context factory cannot hide the failure.
    instance: Any = registry.get(ancestor.runnable).runnable.create(context=None)
    scope = RunScope(run_id=run_id, path=ancestor.path)
    if ancestor.kind == "pipeline":
        await instance.emit_stage_failure(
            scope=scope, on_progress=publisher, index=int(ancestor.position), error=error
        )
    else:
        await instance.emit_composite_failure(
            scope=scope, on_progress=publisher, width=ancestor.width, error=error
        )
    return error

"""Run ids as idempotency keys: what an ``agentloop.launch`` message may do with the id it names.

A launch *claims* its run id: it creates the run owned by the launch
(:class:`~agentloop.orchestration.store.RunOwner`: the digest of the message's arguments,
and a secret token that only the tasks of the canvas this launch builds carry,
in their :class:`~agentloop.orchestration.wire.WorkflowNode` and in ``agentloop.finalize``'s
arguments). A task ends the run only with that token, so a hand-sent
``agentloop.finalize`` or a forged node cannot set or flip the run's outcome.

A message for an id that exists is, by what it carries:

* **the same launch again**, the same Celery task id and arguments (a
  redelivery after a worker died, a Celery retry): it goes on with the run. A
  run that has ended answers with its outcome (*attached*: a succeeded run's
  result, a failed one's error); one still going resumes from its checkpoints.
* **the same arguments under another task id**: attached when the run has
  ended; refused with :class:`RunIdTakenError` while it runs.
* **anything else** (another runnable, input, context or budget, or arguments
  the contract refuses): refused with :class:`RunIdTakenError`, and the run is
  not touched. When such a message even carries the run's own task id, its
  task is ignored instead (``Ignore``), so the result backend keeps the run's
  result, which is then this message's result too.

A launch that is malformed (an argument the contract does not know, no
``runnable``, a value of the wrong type, a runnable nobody registered) is
refused with :class:`~agentloop.orchestration.errors.LaunchRequestError` (an unregistered
name with :class:`~agentloop.orchestration.errors.UnknownRunnableError`) and recorded
as its run's failure, so ``agentloop.progress`` answers ``failed`` with the
reason. Only a run id that the store cannot hold (not a string, a NUL
character, more than 255 characters) records no run: there is no id to record
it under, and nothing could read it back by that id. Its task's result (under
the task id) is the refusal. The refusal's text never quotes a value it
refuses (``orchestration/redaction.py``): a secret pasted into the wrong field
stays out of the logs, the run store and the result backend.

A run the claim creates comes back with its record, its cancel flag in it: that flag is taken as
read (``StoreCancelSignal.remember``), so the check before the run's first step asks the store
nothing more. No cancel can be older than the run it names (cancelling an unknown run does
nothing), so one sent since is seen as one sent just after that check would be: at the next.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentloop.orchestration.errors import (
    LaunchRequestError,
    RunAlreadyEndedError,
    RunExistsError,
    RunIdTakenError,
    RunRecordLike,
    UnknownRunnableError,
)
from agentloop.orchestration.redaction import describe_hidden, hidden_texts, scrub_error
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.store import RunOwner, RunStatus, RunStore
from agentloop.orchestration.store.seams import StoreCancelSignal
from agentloop.orchestration.wire import DegradedResult, LaunchRequest, check_name

__all__ = [
    "LAUNCH_ARGUMENTS",
    "LaunchClaim",
    "attached_result",
    "claim_launch",
    "claim_recorded",
    "launch_digest",
]


#: The keyword arguments ``agentloop.launch`` takes (``LaunchRequest.parse``'s).
LAUNCH_ARGUMENTS = (
    "runnable", "input", "context", "run_id", "token_budget", "deadline_seconds", "principal", "record",
    "concurrency_key", "priority",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchClaim:
    """A launch's hold on its run: the request (or why it is invalid), the run, the owner's token."""

    run_id: str
    request: LaunchRequest | None
    #: Why the launch is malformed (its text quotes none of its values); ``None`` when it is not.
    problem: Exception | None
    record: RunRecordLike
    owner_token: str | None
    #: This launch created the run (it did not find one with its id).
    created: bool = False


def launch_digest(kwargs: Mapping[str, Any]) -> str:
    """A digest of a launch's arguments, its run id included (unset ones left out): equal for a
    redelivery, and for the same launch sent again with its run id given."""
    given = {key: value for key, value in kwargs.items() if value is not None}
    try:
        text = json.dumps(given, sort_keys=True, separators=(",", ":"), default=repr)
    except (TypeError, ValueError, RecursionError):
        text = repr(sorted(given))  # arguments that never make a run: any stable text will do
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()


def _shown(value: Any) -> str:
    """What a run record keeps of a runnable name the contract refuses: its kind and size, never
    its text (``<hidden dict 57 chars>``; ``(none)`` when there is none)."""
    return "(none)" if value is None or value == "" else describe_hidden(value)


def refused(error: Exception, kwargs: Mapping[str, Any]) -> Exception:
    """``error`` with the values of the launch's arguments taken out of its message (in place):
    its names and knobs (the input and the context spec are hidden wherever they go already)."""
    shown = {key: value for key, value in kwargs.items() if key not in ("input", "context")}
    scrub_error(error, hidden_texts((), {"launch": shown}))
    return error


def _request_of(
    kwargs: Mapping[str, Any], run_id: str, registered: RunnableRegistry
) -> tuple[LaunchRequest | None, Exception | None]:
    """The launch's request when it is valid, else why not (with the request when it parses)."""
    unknown = sorted(repr(key)[:40] for key in kwargs if key not in LAUNCH_ARGUMENTS)
    if unknown:
        takes = ", ".join(LAUNCH_ARGUMENTS)
        return None, LaunchRequestError(
            f"agentloop.launch takes no argument {', '.join(unknown)}; it takes {takes}"
        )
    try:
        request = LaunchRequest.parse(**{**kwargs, "run_id": run_id})
    except LaunchRequestError as error:
        return None, refused(error, kwargs)
    if request.runnable not in registered:
        return request, refused(UnknownRunnableError(request.runnable, registered.names), kwargs)
    return request, None


def _asked(
    kwargs: Mapping[str, Any], task_id: str, registered: RunnableRegistry
) -> tuple[str, LaunchRequest | None, Exception | None, RunOwner]:
    """The run id a launch claims, its request (or why it is invalid) and the owner it would
    create the run with."""
    given = kwargs.get("run_id")
    try:
        run_id = check_name(str(given) if type(given) is int else given or task_id, "run_id")
        check_name(task_id, "the launch's task id")
    except LaunchRequestError as error:
        raise refused(error, kwargs) from None
    request, problem = _request_of(kwargs, run_id, registered)
    owner = RunOwner.new(launch_digest({**kwargs, "run_id": run_id}))  # a given id or the task's: one run
    return run_id, request, problem, owner


def claim_launch(
    store: RunStore, kwargs: Mapping[str, Any], *, task_id: str, registered: RunnableRegistry
) -> LaunchClaim:
    """Claim the run id of a launch message (see the module doc); ``registered`` holds the
    runnables a launch may name.

    Raises :class:`~agentloop.orchestration.errors.LaunchRequestError` for a run id the store
    cannot hold, :class:`RunIdTakenError` for an id another launch owns.
    """
    run_id, request, problem, owner = _asked(kwargs, task_id, registered)
    try:
        record = store.create_run(
            run_id=run_id,
            runnable=request.runnable if request and problem is None else _shown(kwargs.get("runnable")),
            input=request.input if request else None,
            token_budget=request.token_budget if request else None,
            celery_task_id=task_id,
            owner=owner,
            principal=request.principal if request else None,
        )
    except RunExistsError as exists:
        stored = store.run_owner(exists.record.id)
        return _claim_existing(exists.record, stored, owner, task_id, request, problem)
    StoreCancelSignal.remember(store, run_id, record.cancel_requested)  # read with it (the module doc)
    return LaunchClaim(
        run_id=run_id, request=request, problem=problem, record=record, owner_token=owner.token, created=True
    )


def claim_recorded(
    kwargs: Mapping[str, Any],
    *,
    task_id: str,
    registered: RunnableRegistry,
    record: RunRecordLike,
    owner: RunOwner | None,
) -> LaunchClaim:
    """:func:`claim_launch` of a launch whose run id names ``record``, read with its ``owner``
    already (a packed batch reads its runs' together: ``store/batch_rounds.py``): the same launch
    goes on, any other is refused, and nothing is written."""
    _, request, problem, mine = _asked(kwargs, task_id, registered)
    return _claim_existing(record, owner, mine, task_id, request, problem)


def _claim_existing(
    record: RunRecordLike,
    owner: RunOwner | None,
    mine: RunOwner,
    task_id: str,
    request: LaunchRequest | None,
    problem: Exception | None,
) -> LaunchClaim:
    """The claim on a run that exists, created by ``owner``: the same launch goes on, any other
    is refused."""
    if owner is not None:
        same_launch = owner.launch_digest == mine.launch_digest
    else:  # created without an owner (e.g. by an older release): its runnable must agree
        same_launch = request is not None and request.runnable == record.runnable
    same_task = record.celery_task_id == task_id
    if same_launch and (same_task or record.is_finished):
        token = owner.token if owner is not None else None
        return LaunchClaim(
            run_id=record.id, request=request, problem=problem, record=record, owner_token=token
        )
    why = "it is still running" if same_launch else "this launch's arguments differ from that run's"
    raise RunIdTakenError(record, same_task=same_task, why=why)


def attached_result(record: RunRecordLike) -> Any:
    """What a launch attached to an ended run returns: the run's result, or its failure raised."""
    if record.status == RunStatus.SUCCEEDED:
        return record.output
    if record.status == RunStatus.DEGRADED:
        error = record.error if isinstance(record.error, Mapping) else {}
        return DegradedResult(output=record.output, error=error).to_wire()
    raise RunAlreadyEndedError(record)

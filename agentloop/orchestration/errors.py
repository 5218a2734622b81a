"""The errors the infrastructure raises on purpose, in one place (the core's are in
``actions/errors.py``). Every one derives from :class:`~agentloop.actions.errors.AgentLoopError`;
the builtin base beside it says which ``except`` clauses written without agentloop in mind also
catch it. The whole tree is drawn in the docstring of the ``agentloop`` package.

This module imports only the core, so every room of ``orchestration/`` may import it. An error
that carries a value of a higher room (a run store's :class:`~agentloop.orchestration.store.RunRecord`)
types it with a narrow protocol of what is read of it (:class:`RunRecordLike`); a small type that
an error and its room share lives here (:data:`DenialReason`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, Protocol

from agentloop.actions.errors import AgentLoopError, ToolUnavailableError

__all__ = [
    "ConcurrencyLimitError",
    "ContextSpecError",
    "DeliveryLimitError",
    "DenialReason",
    "EvaluationInputError",
    "ExternalToolCallsError",
    "InvalidNodeError",
    "LaunchRequestError",
    "McpConfigError",
    "McpResultRefusedError",
    "McpToolError",
    "McpUnavailableError",
    "ModelRequestsBlockedError",
    "NetworkBlockedError",
    "RateLimitTimeoutError",
    "ReplayedTurnError",
    "RunAlreadyEndedError",
    "RunExistsError",
    "RunIdTakenError",
    "RunNotFoundError",
    "RunOwnershipError",
    "RunRecordLike",
    "ScheduleError",
    "SettingsError",
    "StoreUnavailableError",
    "UnknownInputProviderError",
    "UnknownRunnableError",
    "UnsendableMessageError",
    "WorkerStartError",
    "WorkflowFailedError",
]

#: Which limit of a rate-limit window is spent: its ``requests`` or its ``tokens``.
DenialReason = Literal["requests", "tokens"]


class RunRecordLike(Protocol):
    """A stored run as the errors and their handlers read it: a
    :class:`~agentloop.orchestration.store.RunRecord`."""

    @property
    def id(self) -> str: ...

    @property
    def runnable(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def celery_task_id(self) -> str | None: ...

    @property
    def output(self) -> Any: ...

    @property
    def error(self) -> Any: ...

    @property
    def is_finished(self) -> bool: ...


# --------------------------------------------------------------------------- registry and wire


class UnknownRunnableError(AgentLoopError, LookupError):
    """A message or a call named a runnable that is not registered."""

    def __init__(self, name: object, known: Iterable[str]) -> None:
        self.name = name
        self.known = tuple(sorted(known))
        super().__init__(f"unknown runnable {name!r}; registered: {', '.join(self.known) or '(none)'}")


class UnknownInputProviderError(AgentLoopError, LookupError):
    """A batch named an input provider that is not registered."""


class ContextSpecError(AgentLoopError, ValueError):
    """A context spec that is not a JSON object, or whose content the factory rejected (with a
    ``ValueError``, ``TypeError`` or ``LookupError``). Any other error of the factory, such as
    its database failing, is not relabelled: it passes as it is."""


class LaunchRequestError(AgentLoopError, ValueError):
    """The keyword arguments of ``agentloop.launch`` are not what the contract allows."""


class InvalidNodeError(AgentLoopError, ValueError):
    """A task's workflow node is malformed, or names a runnable of a kind its task does not run."""


# --------------------------------------------------------------------------- the run store


class RunNotFoundError(AgentLoopError, KeyError):
    """The store has no run with this id."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(run_id)

    def __str__(self) -> str:
        return f"no run with id {self.run_id!r} in the run store"


class RunExistsError(AgentLoopError, ValueError):
    """A run with this id exists already: ``record`` is the stored run (unchanged)."""

    def __init__(self, record: RunRecordLike) -> None:
        self.record = record
        super().__init__(
            f"run id {record.id!r} is taken by a run of {record.runnable!r} ({record.status}); "
            "a run id names one run only"
        )


class RunAlreadyEndedError(AgentLoopError, ValueError):
    """The run has ended already (``record``, unchanged): an ended run is never rewritten."""

    def __init__(self, record: RunRecordLike) -> None:
        self.record = record
        super().__init__(f"run {record.id!r} has already ended ({record.status}); it is not rewritten")


class RunIdTakenError(AgentLoopError, ValueError):
    """The launch named the id of a run that another launch owns; the run is left as it was.

    ``record`` is that run; ``same_task`` says the message even carried the run's
    own Celery task id (then its task is ignored rather than failed).
    """

    def __init__(self, record: RunRecordLike, *, same_task: bool, why: str) -> None:
        self.record, self.same_task = record, same_task
        super().__init__(
            f"run id {record.id!r} is taken by a run of {record.runnable!r} ({record.status}) "
            f"launched as task {record.celery_task_id}: {why}; launch with a new run id, "
            "or follow that run"
        )


class RunOwnershipError(AgentLoopError, PermissionError):
    """The caller does not hold the token of the launch that owns the run, so may not end it."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r} belongs to another launch: only its own tasks may end it")


class StoreUnavailableError(AgentLoopError, ConnectionError):
    """The run store's database could not be reached, even after retrying for ``seconds``."""

    def __init__(self, message: str, *, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(message)


# --------------------------------------------------------------------------- models


class RateLimitTimeoutError(AgentLoopError, TimeoutError):
    """Getting a slot would take longer than ``max_wait``."""

    def __init__(self, message: str, *, waited: float, max_wait: float, reason: DenialReason) -> None:
        self.waited, self.max_wait, self.reason = waited, max_wait, reason
        super().__init__(message)


class ModelRequestsBlockedError(AgentLoopError, RuntimeError):
    """A processor was about to send a request to a real model server while requests are blocked."""


class NetworkBlockedError(AgentLoopError, ConnectionRefusedError):
    """A connection off this machine, tried while a replay blocks the network (``replay.py``)."""


# --------------------------------------------------------------------------- MCP servers


class McpConfigError(AgentLoopError, ValueError):
    """An MCP server configured wrongly (no command or URL, both, a bad filter), or a tool name it
    does not offer (``orchestration/mcp``)."""


class McpToolError(AgentLoopError, RuntimeError):
    """An MCP tool answered with an error (``isError``): an answer, shown to the model as a tool
    error; the run goes on."""


class McpUnavailableError(ToolUnavailableError, ConnectionError):
    """An MCP server could not be reached, did not answer in time, or died in the call; its
    action's policy says whether the run degrades (the default) or fails."""


class McpResultRefusedError(AgentLoopError, ValueError):
    """An MCP tool's result past the size limit (``max_result_bytes``) or not a result the
    protocol allows: refused, never handed to the step."""


# --------------------------------------------------------------------------- settings


class SettingsError(AgentLoopError, ValueError):
    """A malformed setting; the message names the environment variable and the value."""


class EvaluationInputError(AgentLoopError, ValueError):
    """A dataset line, a scorer or a kept evaluation that ``agentloop eval`` cannot use; the message
    names the line, the scorer or the file."""


class ScheduleError(AgentLoopError, ValueError):
    """A beat schedule entry that cannot be used, with the reason."""


# --------------------------------------------------------------------------- Celery


class WorkerStartError(AgentLoopError, RuntimeError):
    """A worker did not come up (it exited, or never answered the ping)."""


class DeliveryLimitError(AgentLoopError, RuntimeError):
    """A loop was started ``AGENTLOOP_DELIVERY_LIMIT`` times without progress (counted by the run
    store, on every broker), or a message came back unacknowledged as often as RabbitMQ allows:
    every worker that took it died or lost its connection; its run ends with this."""


class ConcurrencyLimitError(AgentLoopError, RuntimeError):
    """A run refused, or cancelled to make room, because its concurrency key had as many runs in
    flight as its limit allows (``docs/how-to/fairness.md``)."""


class UnsendableMessageError(AgentLoopError, ValueError):
    """A message the run needs would be refused at every worker's edge; the run fails with this."""


class ExternalToolCallsError(AgentLoopError, RuntimeError):
    """A pydantic-ai agent deferred tool calls to be run outside it (``CallDeferred``), which a
    runnable has no one to hand to (only approvals become questions)."""


class ReplayedTurnError(AgentLoopError, RuntimeError):
    """A replay reached a pydantic-ai agent's model request its recording does not answer."""


class WorkflowFailedError(AgentLoopError):
    """A run on Celery failed; ``error_type`` and ``message`` are what the failing step raised."""

    def __init__(self, error_type: str, message: str, *, run_id: str) -> None:
        self.error_type, self.message, self.run_id = error_type, message, run_id
        super().__init__(f"{error_type}: {message}")

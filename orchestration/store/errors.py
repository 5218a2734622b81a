"""The errors of the run store, the same for every store.

``RunNotFoundError`` [KeyError], ``RunExistsError`` and ``RunAlreadyEndedError``
[ValueError] (a run id names one run; an ended run is never rewritten),
``RunOwnershipError`` [PermissionError] (only the launch that owns a run ends it)
and ``StoreUnavailableError`` [ConnectionError] (the database stayed away past the
retry budget); each derives from :class:`~actions.AgentLoopError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentloop.actions import AgentLoopError

if TYPE_CHECKING:
    from agentloop.orchestration.store.protocol import RunRecord

__all__ = [
    "RunAlreadyEndedError",
    "RunExistsError",
    "RunNotFoundError",
    "RunOwnershipError",
    "StoreUnavailableError",
]


class RunNotFoundError(AgentLoopError, KeyError):
    """The store has no run with this id."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(run_id)

    def __str__(self) -> str:
        return f"no run with id {self.run_id!r} in the run store"


class RunExistsError(AgentLoopError, ValueError):
    """A run with this id exists already: ``record`` is the stored run (unchanged)."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record
        super().__init__(
            f"run id {record.id!r} is taken by a run of {record.runnable!r} ({record.status}); "
            "a run id names one run only"
        )


class RunAlreadyEndedError(AgentLoopError, ValueError):
    """The run has ended already (``record``, unchanged): an ended run is never rewritten."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record
        super().__init__(f"run {record.id!r} has already ended ({record.status}); it is not rewritten")


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

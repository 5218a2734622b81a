"""The root of the project's one error tree, and the errors of the core.

Every error the framework raises on purpose derives from :class:`AgentLoopError`.
The whole tree, these errors and those the orchestration adds, is drawn once:
in the docstring of the ``agentloop`` package, which exports every one of them.

Model faults inside an action are *values* (``None`` or a declared fallback),
never exceptions: a misbehaving model cannot crash a loop.
"""

from __future__ import annotations

from collections.abc import Iterable


class AgentLoopError(Exception):
    """Root of every error the framework raises on purpose."""


class UnknownActionError(AgentLoopError, KeyError):
    """A name that is not in an :class:`~actions.AgentActionRegistry`."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known = tuple(sorted(known))
        super().__init__(name)

    def __str__(self) -> str:
        known = ", ".join(self.known) or "(none)"
        return f"unknown action {self.name!r}; known actions: {known}"


class RunStoppedError(AgentLoopError):
    """The run ended before it finished; ``status`` says why."""

    status = "stopped"

    def __init__(self, message: str, *, path: str = "") -> None:
        self.path = path
        super().__init__(message)


class RunCancelledError(RunStoppedError):
    """Cooperative cancellation was requested for the run."""

    status = "cancelled"


class RunDeadlineExceededError(RunStoppedError):
    """The run's whole-run deadline passed."""

    status = "deadline_exceeded"


class BranchFailedError(AgentLoopError):
    """A composite branch failed while the composite's policy is fail-fast."""

    def __init__(self, key: str, error: BaseException | str) -> None:
        self.key = key
        self.error = error
        detail = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        super().__init__(f"branch {key!r} failed: {detail}")


class StateNotSerializableError(AgentLoopError, TypeError):
    """Loop state that must be checkpointed is not JSON-serialisable, or is not the loop's declared
    ``state_type`` (a hook's state, or a checkpoint, that does not validate)."""

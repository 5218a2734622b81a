"""The root of the project's one error tree, and every error of the core, in one place.

Every error the framework raises on purpose derives from :class:`AgentLoopError`.
The whole tree, these errors and those the orchestration adds
(``orchestration/errors.py``), is drawn once: in the docstring of the ``agentloop``
package, which exports every one of them.

An error that carries a value of the core (a :class:`~agentloop.actions.degradation.ModelFailure`,
a :class:`~agentloop.actions.human.Question`) types it with a narrow protocol of what it reads
(:class:`ModelFailureLike`, :class:`QuestionLike`): this module imports nothing of the core,
so every module of the core may import it.

Model faults inside an action are *values* (``None`` or a declared fallback),
never exceptions: a misbehaving model cannot crash a loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class ModelFailureLike(Protocol):
    """A failed model call as an error reads it: a :class:`~agentloop.actions.degradation.ModelFailure`."""

    @property
    def action(self) -> str: ...

    @property
    def reason(self) -> str: ...

    @property
    def path(self) -> str: ...


class QuestionLike(Protocol):
    """A question to a person as an error reads it: a :class:`~agentloop.actions.human.Question`."""

    @property
    def prompt(self) -> str: ...

    @property
    def key(self) -> str: ...


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


class TokenBudgetExceededError(AgentLoopError):
    """The run's token budget is spent; the step that hit it ends with this status."""

    status = "budget_exceeded"

    def __init__(self, *, used: int, budget: int) -> None:
        self.used, self.budget = used, budget
        super().__init__(f"token budget exceeded: {used} of {budget} tokens used")


class ModelUnavailableError(AgentLoopError):
    """A step's model call failed and its action's policy is ``fail``."""

    def __init__(self, failure: ModelFailureLike) -> None:
        self.failure = failure
        super().__init__(f"the model is unavailable for {failure.action}: {failure.reason}")


class ToolUnavailableError(AgentLoopError):
    """A tool outside the process (an MCP server's) could not be called: down, slow, or it died
    in the call. ``fails_run``: its action's policy is ``fail``, so an AI-driven loop ends the run
    with it instead of showing the model a tool error (the policy ``degrade`` shows it, and the
    run ends ``degraded``)."""

    def __init__(self, message: str, *, fails_run: bool = False) -> None:
        self.fails_run = fails_run
        super().__init__(message)


class InvalidModelOutputError(AgentLoopError):
    """A step's answer was still rejected after its tries and its action's ``on_invalid_output``
    is ``fail``."""

    def __init__(self, failure: ModelFailureLike) -> None:
        self.failure = failure
        super().__init__(f"the model gave no valid answer for {failure.action}: {failure.reason}")


class InvalidAnswerError(AgentLoopError):
    """An answer that does not meet its question's schema."""

    def __init__(self, question: QuestionLike, reason: str) -> None:
        self.question, self.reason = question, reason
        super().__init__(f"the answer to {question.prompt!r} is refused: {reason}")


class QuestionExpiredError(AgentLoopError):
    """A question's wait ended unanswered, and it has no default."""

    status = "question_expired"

    def __init__(self, question: QuestionLike, *, path: str = "") -> None:
        self.question, self.path = question, path
        super().__init__(f"nobody answered {question.key!r} ({question.prompt!r}) in time")


class NoOneToAskError(AgentLoopError):
    """A step asked a question where no channel to a person exists (give the runner ``on_question``)."""

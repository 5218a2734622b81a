"""Human in the loop: a step asks a person and goes on with the answer.

An action or a loop hook calls ``await ask_human(Question(...))``: an approval
(``approval``: ``true`` or ``false``), a choice among ``choices``, or free text
or JSON checked against a JSON Schema (``text``). The answer is checked against
:meth:`Question.answer_schema` (``jsonschema``) before the step sees it.

Who answers is the run scope's :class:`HumanChannel`, installed for every step
inside the scope as the degradation sink is (``loops/scope.py``):

- inline, :class:`CallbackChannel` calls the ``on_question`` the runner received
  (it may return the answer or an awaitable of it) and the step simply waits;
- on Celery, the orchestration's channel answers from the run store, or pauses
  the task: it raises :class:`RunPaused` (a ``BaseException``, so no step or loop
  mistakes it for a failure), the question is recorded, the task ends without
  holding a worker, and the run resumes from its last checkpoint once answered.
  Re-run, the same question (same ``key``) gets the recorded answer: a question
  is asked at most once per run and workflow path.

A question may expire (``expires_in`` seconds): then ``default`` is its answer,
or, without one, the step raises :class:`QuestionExpiredError`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

import jsonschema

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.context_binding import Binding
from agentloop.actions.errors import InvalidAnswerError, NoOneToAskError
from agentloop.actions.recording import HUMAN, record_entry


class QuestionKind(StrEnum):
    """What a question asks for: a yes/no ``approval``, one of its ``choice``s, or ``text``."""

    APPROVAL = "approval"
    CHOICE = "choice"
    TEXT = "text"


_NO_DEFAULT: Any = object()


@dataclass(frozen=True, kw_only=True, slots=True)
class Question:
    """One question to a person.

    ``schema`` (``text`` only) is the JSON Schema the answer must meet (default: a string);
    ``key`` tells apart two questions of one step (default: a digest of the question);
    ``expires_in`` (seconds) ends the wait with ``default``, or without one with
    :class:`QuestionExpiredError`.
    """

    prompt: str
    kind: QuestionKind = QuestionKind.TEXT
    choices: tuple[str, ...] = ()
    schema: Mapping[str, Any] | None = None
    key: str = ""
    expires_in: float | None = None
    default: Any = field(default=_NO_DEFAULT)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", QuestionKind(self.kind))
        object.__setattr__(self, "choices", tuple(self.choices))
        if self.kind == QuestionKind.CHOICE and not self.choices:
            raise ValueError("a choice question needs choices")
        if self.expires_in is not None and self.expires_in <= 0:
            raise ValueError("expires_in must be positive")
        if not self.key:
            object.__setattr__(self, "key", self._digest())

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT

    def answer_schema(self) -> dict[str, Any]:
        """The JSON Schema an answer must meet."""
        if self.kind == QuestionKind.APPROVAL:
            return {"type": "boolean"}
        if self.kind == QuestionKind.CHOICE:
            return {"enum": list(self.choices)}
        return dict(self.schema) if self.schema is not None else {"type": "string"}

    def to_dict(self) -> dict[str, Any]:
        """The question as JSON (its default only when it has one)."""
        data: dict[str, Any] = {
            "prompt": self.prompt,
            "kind": self.kind.value,
            "choices": list(self.choices),
            "schema": None if self.schema is None else dict(self.schema),
            "key": self.key,
            "expires_in": self.expires_in,
        }
        if self.has_default:
            data["default"] = self.default
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Question:
        extra = {"default": data["default"]} if "default" in data else {}
        return cls(
            prompt=str(data["prompt"]),
            kind=QuestionKind(data.get("kind", "text")),
            choices=tuple(data.get("choices") or ()),
            schema=data.get("schema"),
            key=str(data.get("key") or ""),
            expires_in=data.get("expires_in"),
            **extra,
        )

    def _digest(self) -> str:
        body: dict[str, Any] = {"prompt": self.prompt, "kind": self.kind.value}
        body.update(choices=list(self.choices), schema=None if self.schema is None else dict(self.schema))
        text = json.dumps(body, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


class RunPaused(BaseException):
    """Raised by a channel that cannot wait here: the run pauses until ``question`` is answered.

    A ``BaseException``, so ``except Exception`` in steps and loops lets it through untouched.
    """

    def __init__(self, question: Question, *, path: str = "") -> None:
        self.question, self.path = question, path
        super().__init__(f"waiting for an answer to {question.key!r} at {path!r}")


def check_answer(question: Question, answer: Any) -> Any:
    """``answer`` when it meets the question's schema; else :class:`InvalidAnswerError`."""
    try:
        jsonschema.validate(answer, question.answer_schema())
    except jsonschema.ValidationError as error:
        where = "/".join(str(part) for part in error.absolute_path)
        raise InvalidAnswerError(question, f"{where}: {error.message}" if where else error.message) from None
    return answer


@runtime_checkable
class HumanChannel(Protocol):
    """Who answers a run's questions: ``ask`` returns the checked answer, or raises
    :class:`RunPaused` when the run must pause for it."""

    async def ask(self, question: Question, *, path: str) -> Any: ...


#: What an inline runner calls with a question: the answer, or an awaitable of it.
QuestionCallback = Callable[[Question], Any]


class CallbackChannel:
    """The inline channel: asks ``on_question`` and waits for its answer (checked, never cached:
    an inline run that asks again asks again)."""

    def __init__(self, on_question: QuestionCallback) -> None:
        self.on_question = on_question

    async def ask(self, question: Question, *, path: str) -> Any:
        reply = self.on_question(question)
        answer = await maybe_await(reply) if isinstance(reply, Awaitable) else reply
        return check_answer(question, answer)


_channel: ContextVar[tuple[HumanChannel, str] | None] = ContextVar("agentloop_human_channel", default=None)


def use_human_channel(
    channel: HumanChannel | None, *, path: str = ""
) -> Binding[tuple[HumanChannel, str] | None]:
    """Send the questions of steps inside the block to ``channel``, at workflow ``path``."""
    return Binding(_channel, None if channel is None else (channel, path))


async def ask_human(question: Question) -> Any:
    """Ask the run's person ``question`` and return the checked answer.

    Inline the step waits; on Celery the run may pause here and this step's loop iteration
    runs again, from its checkpoint, once the answer is in. Raises :class:`NoOneToAskError`
    outside a run with a channel, :class:`QuestionExpiredError` when the wait expired.
    """
    bound = _channel.get()
    if bound is None:
        raise NoOneToAskError(f"no one to ask {question.prompt!r}: give the runner on_question")
    channel, path = bound
    answer = await channel.ask(question, path=path)
    await record_entry(HUMAN, {"key": question.key, "question": question.to_dict(), "answer": answer})
    return answer

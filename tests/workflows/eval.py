"""Runnables and scorers the evaluation tests name: registered for
``AGENTLOOP_IMPORTS=workflows.eval`` (in the test process and in the embedded worker), and
the ``--scorer`` functions and types."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agentloop import EvalScore
from agentloop.actions import report_model_failure
from agentloop.orchestration.registry import register
from agentloop.pipelines import step


@step
def shout(text: Any, context: Any) -> Any:
    """The text in capitals (in small letters when the context spec says ``{"whisper": true}``); the
    input ``"boom"`` raises."""
    if text == "boom":
        raise ValueError("boom went the case")
    return str(text).lower() if context.get("whisper") else str(text).upper()


@step
async def shout_with_fallback(text: Any) -> Any:
    """As :func:`shout`, but every answer is a fallback: a model call failed on the way (degraded)."""
    await report_model_failure(action="shout_with_fallback", reason="the model was away")
    return str(text).upper()


@step
def profile(person: Any) -> Any:
    """A profile built from the input, as it is: ``age`` may be anything."""
    return {"name": person.get("name"), "age": person.get("age")}


@step
def leaky(text: Any, context: Any) -> Any:
    """Raises with the context spec's token in its message (a secret the report must not keep)."""
    raise PermissionError(f"the service refused token {context['token']}")


register("evals.shout", shout)
register("evals.leaky", leaky)
register("evals.degraded", shout_with_fallback)
register("evals.profile", profile)


class Profile(BaseModel):
    """What ``evals.profile`` must return (``--scorer type:workflows.eval:Profile``)."""

    name: str
    age: int = Field(ge=0)


def length_ratio(output: Any, expected: Any) -> float:
    """How close the output's length is to the expected one's, from 0 to 1."""
    want, got = len(str(expected)), len(str(output))
    return min(want, got) / max(want, got, 1)


def starts_right(*, output: Any, case: Any) -> dict[str, Any]:
    """Whether the output starts with the case's first letter, as ``{score, reason}``."""
    same = str(output)[:1].lower() == str(case.input)[:1].lower()
    return {"score": same, "reason": "" if same else "a different first letter"}


async def polite(output: Any) -> EvalScore:
    """An ``async`` scorer returning an :class:`EvalScore`: capitals are shouting."""
    loud = str(output).isupper()
    return EvalScore(value=0.0 if loud else 1.0, passed=not loud, reason="shouted" if loud else "")


def broken_scorer(output: Any) -> float:
    """A scorer with a bug: it raises on every output."""
    raise RuntimeError("the scorer tripped")


def out_of_range(output: Any) -> float:
    """A scorer that returns a number outside 0..1."""
    return 7.0


def needs_more(output: Any, rubric: str) -> float:
    """A scorer that requires an argument no evaluation gives."""
    return 1.0

"""The scorers of an evaluation, and the ``--scorer`` spec that names each.

===========================  =====================================================================
``--scorer``                 scores an output by
===========================  =====================================================================
``exact``                    equality with the case's ``expected`` (as JSON: a tuple equals a list);
                             the default when every case has an ``expected``
``type:MODULE:TYPE``         validation against a pydantic model (or any type pydantic validates):
                             passes when the output is a valid ``TYPE``, the reason lists the errors
``judge``                    a model's verdict (:mod:`~agentloop.orchestration.evals.judge`), a score
                             from 0 to 1 with its reason, against ``--criteria``
``MODULE:FUNCTION``          a function of the user's: called with the keywords it declares among
                             ``input``, ``output``, ``expected`` and ``case``; returns a ``bool``, a
                             number from 0 to 1, an :class:`~agentloop.orchestration.evals.verdicts.EvalScore`
                             or ``{"score", "reason"}``; may be ``async``
===========================  =====================================================================

A number passes at ``--threshold`` (default 0.5). A scorer that raises, returns something else, or
whose judge's model fails gives an error score: the case fails, with the reason.
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import TypeAdapter, ValidationError

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.model import ModelProcessor
from agentloop.actions.schema import validation_problems
from agentloop.actions.usage import InMemoryUsageMeter
from agentloop.loops.runner import InlineAgentRunner
from agentloop.orchestration.errors import EvaluationInputError
from agentloop.orchestration.evals.dataset import EvalCase
from agentloop.orchestration.evals.judge import JudgeStage
from agentloop.orchestration.evals.verdicts import DEFAULT_THRESHOLD, EvalScore, as_score

__all__ = [
    "ExactMatch",
    "FunctionScorer",
    "JudgeScorer",
    "Scorer",
    "TypeScorer",
    "resolve_scorers",
]

#: The keywords a scorer function may declare.
FUNCTION_KEYWORDS = ("input", "output", "expected", "case")
#: The longest quote of an output or an expected value in a reason.
_QUOTE = 120


class Scorer(Protocol):
    """Scores one case's output; ``name`` heads its column and keys its scores in the report."""

    name: str

    async def score(self, *, case: EvalCase, output: Any) -> EvalScore: ...


def _quote(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _QUOTE else text[: _QUOTE - 1] + "…"


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


@dataclass
class ExactMatch:
    """Equality with the case's ``expected``, compared as JSON."""

    name: str = "exact"

    async def score(self, *, case: EvalCase, output: Any) -> EvalScore:
        if not case.has_expected:
            return EvalScore.failed("the case has no expected output to match")
        if _as_json(output) == _as_json(case.expected):
            return EvalScore(value=1.0, passed=True)
        return EvalScore(
            value=0.0, passed=False, reason=f"expected {_quote(case.expected)}, got {_quote(output)}"
        )


@dataclass
class TypeScorer:
    """Validation of the output against a type (a pydantic model, a dataclass, ``list[int]``, ...)."""

    type_: Any
    name: str

    async def score(self, *, case: EvalCase, output: Any) -> EvalScore:
        try:
            TypeAdapter(self.type_).validate_python(output)
        except ValidationError as error:
            return EvalScore(value=0.0, passed=False, reason=validation_problems(error.errors()))
        return EvalScore(value=1.0, passed=True)


@dataclass
class FunctionScorer:
    """A user's function (see the module doc); its answer becomes a score with :func:`as_score`."""

    function: Callable[..., Any]
    name: str
    threshold: float = DEFAULT_THRESHOLD
    keywords: tuple[str, ...] = FUNCTION_KEYWORDS

    async def score(self, *, case: EvalCase, output: Any) -> EvalScore:
        given = {"input": case.input, "output": output, "expected": case.expected, "case": case}
        try:
            answer = await maybe_await(self.function(**{key: given[key] for key in self.keywords}))
            return as_score(answer, threshold=self.threshold)
        except Exception as error:
            return EvalScore.failed(f"{self.name} raised {type(error).__name__}: {error}")


@dataclass
class JudgeScorer:
    """A model's verdict, through :class:`~agentloop.orchestration.evals.judge.JudgeStage` on
    ``processor``; the tokens its calls used are summed in ``input_tokens`` / ``output_tokens``."""

    processor: ModelProcessor
    criteria: str | None = None
    threshold: float = DEFAULT_THRESHOLD
    name: str = "judge"
    input_tokens: int = field(default=0, init=False)
    output_tokens: int = field(default=0, init=False)

    async def score(self, *, case: EvalCase, output: Any) -> EvalScore:
        arguments: dict[str, Any] = {"criteria": self.criteria, "input": case.input, "output": output}
        if case.has_expected:
            arguments["expected"] = case.expected
        meter = InMemoryUsageMeter()
        runner = InlineAgentRunner.create(runnable=JudgeStage, context={"processor": self.processor})
        try:
            outcome = await runner.request_outcome(input=arguments, meter=meter)
        except Exception as error:
            return EvalScore.failed(f"the judge failed: {type(error).__name__}: {error}")
        finally:
            self.input_tokens += meter.usage.input_tokens
            self.output_tokens += meter.usage.output_tokens
        verdict = outcome.result
        if outcome.degraded or not isinstance(verdict, dict):
            reasons = "; ".join(failure.reason for failure in outcome.failures) or "no verdict"
            return EvalScore.failed(f"the judge's model failed: {reasons}")
        value = float(verdict["score"])
        return EvalScore(value=value, passed=value >= self.threshold, reason=str(verdict["reason"]))


def _load(path: str, spec: str) -> Any:
    """``MODULE:NAME`` (``NAME`` may be dotted) imported, or an error naming the spec."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise EvaluationInputError(
            f"--scorer {spec!r}: write exact, judge, type:MODULE:TYPE or MODULE:FUNCTION"
        )
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as error:  # not found, or the module itself raised while loading
        raise EvaluationInputError(
            f"--scorer {spec!r}: cannot import {module_name!r}: {type(error).__name__}: {error}"
        ) from None
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise EvaluationInputError(f"--scorer {spec!r}: {module_name!r} has no {attribute!r}")
        value = getattr(value, part)
    return value


def _keywords(function: Callable[..., Any], spec: str) -> tuple[str, ...]:
    """The keywords ``function`` is called with: those it declares of :data:`FUNCTION_KEYWORDS`."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return FUNCTION_KEYWORDS
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
        return FUNCTION_KEYWORDS
    names = tuple(parameter.name for parameter in parameters)
    required = [
        parameter.name
        for parameter in parameters
        if parameter.default is inspect.Parameter.empty
        and parameter.kind is not inspect.Parameter.VAR_POSITIONAL
        and parameter.name not in FUNCTION_KEYWORDS
    ]
    if required:
        raise EvaluationInputError(
            f"--scorer {spec!r} takes {required}: a scorer function is called with the keywords it "
            f"declares among {list(FUNCTION_KEYWORDS)}"
        )
    return tuple(name for name in FUNCTION_KEYWORDS if name in names)


def _scorer(spec: str, threshold: float, judge: Callable[[], JudgeScorer] | None) -> Scorer:
    if spec == "exact":
        return ExactMatch()
    if spec == "judge":
        if judge is None:
            raise EvaluationInputError("--scorer judge needs a model, and none was given")
        return judge()
    if spec.startswith("type:"):
        type_ = _load(spec.removeprefix("type:"), spec)
        try:
            TypeAdapter(type_)
        except Exception as error:
            raise EvaluationInputError(
                f"--scorer {spec!r}: pydantic cannot validate against it: {error}"
            ) from None
        return TypeScorer(type_=type_, name=spec)
    function = _load(spec, spec)
    if isinstance(function, type):
        raise EvaluationInputError(
            f"--scorer {spec!r} names a type: write type:{spec} to validate outputs against it"
        )
    if not callable(function):
        raise EvaluationInputError(f"--scorer {spec!r} is not a function")
    return FunctionScorer(
        function=function, name=spec, threshold=threshold, keywords=_keywords(function, spec)
    )


def resolve_scorers(
    specs: Sequence[str],
    *,
    cases: Sequence[EvalCase],
    threshold: float = DEFAULT_THRESHOLD,
    judge: Callable[[], JudgeScorer] | None = None,
) -> list[Scorer]:
    """The scorers ``specs`` name (see the module doc); without any, exact match when every case
    has an ``expected``, else an error saying to give one."""
    if not specs:
        missing = [case.id for case in cases if not case.has_expected]
        if missing:
            raise EvaluationInputError(
                f'cases {missing[:5]} have no "expected": give --scorer (type:MODULE:TYPE, judge or '
                "MODULE:FUNCTION), or an expected output on every line for exact match"
            )
        specs = ["exact"]
    duplicated = sorted({spec for spec in specs if list(specs).count(spec) > 1})
    if duplicated:
        raise EvaluationInputError(f"--scorer {duplicated[0]!r} is given twice")
    return [_scorer(spec, threshold, judge) for spec in specs]

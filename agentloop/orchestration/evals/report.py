"""The result of an evaluation: each case's run and scores, with what was evaluated.

An :class:`EvalReport` is what ``agentloop eval`` keeps, prints as JSON and draws as HTML: the
runnable, the dataset (its path and SHA-256), where it ran (``inline`` or ``celery``), the code
version (:mod:`~agentloop.orchestration.evals.version`), the model, the scorers, and one
:class:`CaseResult` per case. A case passes only when its run ``succeeded`` and every score passed:
a run that failed, degraded (model calls failed and a fallback answered) or did not end never passes,
whatever its output. :meth:`EvalReport.to_dict` and :meth:`EvalReport.from_dict` round-trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentloop.orchestration.evals.verdicts import EvalScore

__all__ = ["FORMAT", "CaseResult", "EvalReport"]

#: The version of the report's JSON shape.
FORMAT = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class CaseResult:
    """One case: its input and expectation, its run (``status``, ``output``, ``error``, ``run_id``,
    tokens) and its scores by scorer name."""

    id: str
    input: Any
    expected: Any = None
    has_expected: bool = False
    status: str
    output: Any = None
    error: Any = None
    run_id: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    scores: Mapping[str, EvalScore] = field(default_factory=dict)
    #: How the run ended when it returned (``"complete"``, or ``"bound"``: a loop hit its bound).
    stopped_by: str | None = None
    #: How the case's dataset line says the run must end, when it says.
    expected_stopped_by: str | None = None

    @property
    def passed(self) -> bool:
        """The run succeeded, ended as the case expects (``stopped_by``, when it says) and every
        score passed (a case with no score does not pass)."""
        return (
            self.status == "succeeded"
            and self.stopped_as_expected
            and bool(self.scores)
            and all(s.passed for s in self.scores.values())
        )

    @property
    def stopped_as_expected(self) -> bool:
        """Whether the run ended as the case expects (true when it expects nothing)."""
        return self.expected_stopped_by is None or self.stopped_by == self.expected_stopped_by

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "input": self.input,
            **({"expected": self.expected} if self.has_expected else {}),
            "status": self.status,
            "output": self.output,
            "error": self.error,
            "run_id": self.run_id,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "scores": {name: score.to_dict() for name, score in self.scores.items()},
            "stopped_by": self.stopped_by,
            **({"expected_stopped_by": self.expected_stopped_by} if self.expected_stopped_by else {}),
            "passed": self.passed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CaseResult:
        return cls(
            id=str(data["id"]),
            input=data.get("input"),
            expected=data.get("expected"),
            has_expected="expected" in data,
            status=str(data["status"]),
            output=data.get("output"),
            error=data.get("error"),
            run_id=data.get("run_id"),
            input_tokens=int(data.get("input_tokens") or 0),
            output_tokens=int(data.get("output_tokens") or 0),
            scores={str(name): EvalScore.from_dict(score) for name, score in dict(data["scores"]).items()},
            stopped_by=data.get("stopped_by"),
            expected_stopped_by=data.get("expected_stopped_by"),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalReport:
    """A whole evaluation (see the module doc)."""

    id: str
    runnable: str
    dataset: Mapping[str, Any]
    mode: str
    created_at: str
    duration_seconds: float
    code: Mapping[str, Any]
    model: Mapping[str, Any]
    scorers: tuple[str, ...]
    threshold: float
    cases: tuple[CaseResult, ...]
    #: The judge's model and token use, when a judge scored.
    judge: Mapping[str, Any] | None = None

    def aggregate(self) -> dict[str, Any]:
        """Counts over the cases (passed, runs by status, tokens) and each scorer's mean and passes."""
        total = len(self.cases)
        passed = sum(case.passed for case in self.cases)
        by_status: dict[str, int] = {}
        for case in self.cases:
            by_status[case.status] = by_status.get(case.status, 0) + 1
        scorers = {}
        for name in self.scorers:
            scores = [case.scores[name] for case in self.cases if name in case.scores]
            scorers[name] = {
                "mean": round(sum(s.value for s in scores) / len(scores), 4) if scores else None,
                "passed": sum(s.passed for s in scores),
                "errors": sum(s.error for s in scores),
            }
        return {
            "cases": total,
            "passed": passed,
            "failed": total - passed,
            "pass_rate": round(passed / total, 4) if total else 0.0,
            "runs": dict(sorted(by_status.items())),
            "scorers": scorers,
            "input_tokens": sum(case.input_tokens for case in self.cases),
            "output_tokens": sum(case.output_tokens for case in self.cases),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "id": self.id,
            "runnable": self.runnable,
            "dataset": dict(self.dataset),
            "mode": self.mode,
            "created_at": self.created_at,
            "duration_seconds": self.duration_seconds,
            "code": dict(self.code),
            "model": dict(self.model),
            "judge": None if self.judge is None else dict(self.judge),
            "scorers": list(self.scorers),
            "threshold": self.threshold,
            "aggregate": self.aggregate(),
            "cases": [case.to_dict() for case in self.cases],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvalReport:
        """The report :meth:`to_dict` wrote (``KeyError``, ``TypeError`` or ``ValueError`` for
        anything else)."""
        if data.get("format") != FORMAT:
            raise ValueError(f"not an evaluation report of format {FORMAT} (format {data.get('format')!r})")
        judge = data.get("judge")
        return cls(
            id=str(data["id"]),
            runnable=str(data["runnable"]),
            dataset=dict(data["dataset"]),
            mode=str(data["mode"]),
            created_at=str(data["created_at"]),
            duration_seconds=float(data["duration_seconds"]),
            code=dict(data["code"]),
            model=dict(data["model"]),
            judge=None if judge is None else dict(judge),
            scorers=tuple(str(name) for name in data["scorers"]),
            threshold=float(data["threshold"]),
            cases=tuple(CaseResult.from_dict(case) for case in data["cases"]),
        )

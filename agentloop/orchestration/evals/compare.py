"""What changed between two evaluations, case by case (matched by id), regressions first.

Each case of either evaluation gets one :class:`CaseChange`, of a :data:`KINDS` kind, in this order:

- ``regressed``: it passed before and fails now (this is what ``agentloop eval compare`` exits 1 on);
- ``worse``: the same verdict, a lower score on some scorer;
- ``fixed``: it failed before and passes now;
- ``better``: the same verdict, a higher score and none lower;
- ``added`` / ``removed``: in one evaluation only;
- ``same``: the same verdict and scores.

Within a kind, the largest drop (or rise) comes first. Scores are compared on the scorers both
evaluations have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentloop.orchestration.evals.report import CaseResult, EvalReport

__all__ = ["KINDS", "CaseChange", "Comparison", "compare_reports"]

#: The kinds of change, in the order they are listed.
KINDS = ("regressed", "worse", "fixed", "better", "added", "removed", "same")


@dataclass(frozen=True, kw_only=True, slots=True)
class CaseChange:
    """One case in two evaluations: its ``kind`` of change, the verdicts, statuses and outputs
    before and after, and each shared scorer's ``(before, after)`` values."""

    id: str
    kind: str
    before_passed: bool | None
    after_passed: bool | None
    before_status: str | None
    after_status: str | None
    scores: dict[str, tuple[float, float]]
    #: The case's outputs in each evaluation (``None`` where it is not in one).
    before_output: Any = None
    after_output: Any = None

    @property
    def delta(self) -> float:
        """The sum of the scorers' changes (negative: worse)."""
        return round(sum(after - before for before, after in self.scores.values()), 6)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "before": {
                "passed": self.before_passed,
                "status": self.before_status,
                "output": self.before_output,
            },
            "after": {"passed": self.after_passed, "status": self.after_status, "output": self.after_output},
            "scores": {
                name: {"before": before, "after": after, "delta": round(after - before, 6)}
                for name, (before, after) in self.scores.items()
            },
            "delta": self.delta,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Comparison:
    """Evaluation ``before`` against ``after``: their summaries and the changes, in order."""

    before: EvalReport
    after: EvalReport
    changes: tuple[CaseChange, ...]

    @property
    def regressions(self) -> tuple[CaseChange, ...]:
        return tuple(change for change in self.changes if change.kind == "regressed")

    def counts(self) -> dict[str, int]:
        return {kind: sum(change.kind == kind for change in self.changes) for kind in KINDS}

    def to_dict(self) -> dict[str, Any]:
        def side(report: EvalReport) -> dict[str, Any]:
            return {
                "id": report.id,
                "runnable": report.runnable,
                "created_at": report.created_at,
                "dataset": dict(report.dataset),
                "code": dict(report.code),
                "model": dict(report.model),
                "aggregate": report.aggregate(),
            }

        return {
            "before": side(self.before),
            "after": side(self.after),
            "same_dataset": self.before.dataset.get("sha256") == self.after.dataset.get("sha256"),
            "counts": self.counts(),
            "changes": [change.to_dict() for change in self.changes],
        }


def _change(case_id: str, before: CaseResult | None, after: CaseResult | None) -> CaseChange:
    shared: dict[str, tuple[float, float]] = {}
    if before is not None and after is not None:
        shared = {
            name: (before.scores[name].value, after.scores[name].value)
            for name in before.scores
            if name in after.scores
        }
    if before is None:
        kind = "added"
    elif after is None:
        kind = "removed"
    elif before.passed and not after.passed:
        kind = "regressed"
    elif after.passed and not before.passed:
        kind = "fixed"
    elif any(new < old for old, new in shared.values()):
        kind = "worse"
    elif any(new > old for old, new in shared.values()):
        kind = "better"
    else:
        kind = "same"
    return CaseChange(
        id=case_id,
        kind=kind,
        before_passed=None if before is None else before.passed,
        after_passed=None if after is None else after.passed,
        before_status=None if before is None else before.status,
        after_status=None if after is None else after.status,
        scores=shared,
        before_output=None if before is None else before.output,
        after_output=None if after is None else after.output,
    )


def compare_reports(before: EvalReport, after: EvalReport) -> Comparison:
    """The changes from ``before`` to ``after`` (see the module doc)."""
    old = {case.id: case for case in before.cases}
    new = {case.id: case for case in after.cases}
    ids = [*old, *(case_id for case_id in new if case_id not in old)]
    changes = [_change(case_id, old.get(case_id), new.get(case_id)) for case_id in ids]
    order = {kind: index for index, kind in enumerate(KINDS)}

    def rank(change: CaseChange) -> tuple[int, float]:
        # drops first among regressions and worse cases; rises first among fixed and better ones
        return order[change.kind], (change.delta if change.kind in ("regressed", "worse") else -change.delta)

    return Comparison(before=before, after=after, changes=tuple(sorted(changes, key=rank)))

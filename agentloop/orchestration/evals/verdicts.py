"""``EvalScore``: what a scorer says of one output, and how a scorer's plain answer becomes one.

A score is a ``value`` from 0 to 1, whether the case ``passed`` on it, and a ``reason``. A scorer that
could not score (it raised, the judge's model failed) gives an ``error`` score: value 0, not passed,
the reason saying why, so an outage never reads as a pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_THRESHOLD", "EvalScore", "as_score"]

#: The least value a number-valued score passes at (``--threshold``).
DEFAULT_THRESHOLD = 0.5


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalScore:
    """One scorer's verdict on one output: ``value`` in [0, 1], ``passed``, why (``reason``), and
    ``error`` when the scorer could not score at all (then ``value`` is 0 and ``passed`` false).

    A user's scorer function may return one (``from agentloop import EvalScore``), a ``bool``, a
    number from 0 to 1, or ``{"score": ..., "reason": ...}``.
    """

    value: float
    passed: bool
    reason: str = ""
    error: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, int | float):
            raise TypeError(f"a score's value is a number from 0 to 1, not {self.value!r}")
        if not (math.isfinite(self.value) and 0.0 <= self.value <= 1.0):
            raise ValueError(f"a score's value is a number from 0 to 1, not {self.value!r}")
        if self.error and self.passed:
            raise ValueError("a scorer that could not score does not pass the case")

    @classmethod
    def failed(cls, reason: str) -> EvalScore:
        """The score of a scorer that could not score (see the module doc)."""
        return cls(value=0.0, passed=False, reason=reason, error=True)

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "passed": self.passed, "reason": self.reason, "error": self.error}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvalScore:
        return cls(
            value=float(data["value"]),
            passed=bool(data["passed"]),
            reason=str(data.get("reason") or ""),
            error=bool(data.get("error", False)),
        )


def as_score(answer: Any, *, threshold: float = DEFAULT_THRESHOLD) -> EvalScore:
    """A scorer's answer as a score: an :class:`EvalScore` as it is; ``True``/``False`` as 1/0; a
    number from 0 to 1 passing at ``threshold``; a mapping with ``score`` (and ``reason``, ``passed``).

    Raises ``TypeError`` or ``ValueError`` saying what was returned instead.
    """
    if isinstance(answer, EvalScore):
        return answer
    if isinstance(answer, bool):
        return EvalScore(value=float(answer), passed=answer)
    if isinstance(answer, int | float):
        value = float(answer)
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise ValueError(f"a score is a number from 0 to 1, not {answer!r}")
        return EvalScore(value=value, passed=value >= threshold)
    if isinstance(answer, Mapping) and "score" in answer:
        score = as_score(answer["score"], threshold=threshold)
        passed = answer.get("passed", score.passed)
        reason = answer.get("reason", "")
        return EvalScore(value=score.value, passed=bool(passed), reason=str(reason or ""))
    raise TypeError(
        "a scorer returns a bool, a number from 0 to 1, an EvalScore or {'score': ..., 'reason': ...}, "
        f"not {type(answer).__name__}"
    )

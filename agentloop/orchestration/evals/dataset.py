"""A dataset of cases: one JSON object a line, ``{"input": ..., "expected": ..., "id": ...}``.

``input`` is required (any JSON: what the runnable is given); ``expected`` is optional (the exact-match
scorer and a judge compare with it); ``id`` is optional, a string or an integer, unique in the file
(default: the line's number, so give ids when lines may move and evaluations are compared);
``stopped_by`` is optional, ``"complete"`` or ``"bound"``: how the case's run must end (a case
whose run stopped otherwise fails: ``"complete"`` refuses a loop that hit its ``max_iterations``,
``"bound"`` expects one). Blank
lines are skipped. Anything else is an :class:`~agentloop.orchestration.errors.EvaluationInputError`
naming the line: a line that is not JSON, not an object, without ``input``, with a key of another
name (a misspelt ``expected`` would otherwise score nothing), or an id met before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentloop.orchestration.errors import EvaluationInputError

__all__ = ["CASE_KEYS", "Dataset", "EvalCase", "load_dataset", "parse_dataset"]

#: The keys a dataset line may have.
CASE_KEYS = ("id", "input", "expected", "stopped_by")
#: The values of a case's ``stopped_by``.
STOPPED_BY = ("complete", "bound")


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalCase:
    """One line of a dataset: its ``id``, the runnable's ``input``, and the ``expected`` output when
    the line gives one (``has_expected``: ``expected: null`` is an expectation too)."""

    id: str
    input: Any
    expected: Any = None
    has_expected: bool = False
    line: int = 0
    #: How the case's run must end (``"complete"`` or ``"bound"``), when the line says.
    stopped_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The case as its dataset line has it (``expected`` and ``stopped_by`` only when given)."""
        data: dict[str, Any] = {"id": self.id, "input": self.input}
        if self.has_expected:
            data["expected"] = self.expected
        if self.stopped_by is not None:
            data["stopped_by"] = self.stopped_by
        return data


@dataclass(frozen=True, kw_only=True, slots=True)
class Dataset:
    """The cases of one file, with where it was read and the SHA-256 of its bytes."""

    path: str
    sha256: str
    cases: tuple[EvalCase, ...]


def load_dataset(path: Path | str) -> Dataset:
    """The cases of the JSON Lines file at ``path`` (see the module doc)."""
    where = Path(path)
    try:
        data = where.read_bytes()
    except OSError as error:
        raise EvaluationInputError(
            f"cannot read the dataset {str(where)!r}: {error.strerror or error}"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise EvaluationInputError(
            f"{where}: not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    return Dataset(
        path=str(where), sha256=hashlib.sha256(data).hexdigest(), cases=parse_dataset(text, name=str(where))
    )


def parse_dataset(text: str, *, name: str = "dataset") -> tuple[EvalCase, ...]:
    """The cases of ``text``, one JSON object a line; ``name`` prefixes the errors."""
    cases: list[EvalCase] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        case = _case(raw, number, name)
        if case.id in seen:
            raise EvaluationInputError(
                f"{name} line {number}: id {case.id!r} is also the id of line {seen[case.id]}"
            )
        seen[case.id] = number
        cases.append(case)
    if not cases:
        raise EvaluationInputError(f'{name} holds no case: write one JSON object a line, with an "input"')
    return tuple(cases)


def _case(raw: str, number: int, name: str) -> EvalCase:
    where = f"{name} line {number}"
    try:
        value = json.loads(raw)
    except ValueError as error:
        raise EvaluationInputError(f"{where} is not valid JSON: {error}") from None
    if not isinstance(value, Mapping):
        raise EvaluationInputError(
            f'{where} must be a JSON object with an "input", not {type(value).__name__}'
        )
    unknown = sorted(set(value) - set(CASE_KEYS))
    if unknown:
        raise EvaluationInputError(f"{where} has unknown keys {unknown}; a case has only {list(CASE_KEYS)}")
    if "input" not in value:
        raise EvaluationInputError(f'{where} has no "input"')
    case_id = value.get("id", number)
    if isinstance(case_id, bool) or not isinstance(case_id, str | int) or case_id == "":
        raise EvaluationInputError(f'{where}: "id" must be a non-empty string or an integer, not {case_id!r}')
    stopped_by = value.get("stopped_by")
    if stopped_by is not None and stopped_by not in STOPPED_BY:
        raise EvaluationInputError(f'{where}: "stopped_by" must be "complete" or "bound", not {stopped_by!r}')
    return EvalCase(
        id=str(case_id),
        input=value["input"],
        expected=value.get("expected"),
        has_expected="expected" in value,
        line=number,
        stopped_by=stopped_by,
    )

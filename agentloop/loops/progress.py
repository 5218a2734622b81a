"""The progress event: one JSON-serialisable record of where a run is.

Its ``data`` may hold pydantic models and dataclasses (a typed loop's state, say): they are kept as
their JSON (``model_dump(mode="json")``), so an event reads the same on both runners and in the store.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from agentloop.actions.schema import json_output

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class ProgressStatus(StrEnum):
    """How a runnable stands at an event: ``started``, ``progress``, ``completed`` or ``failed``."""

    STARTED = "started"
    PROGRESS = "progress"
    COMPLETED = "completed"
    FAILED = "failed"


def freeze(value: Any) -> Any:
    """A deep read-only copy of JSON-like data (dicts -> mappingproxy, lists -> tuples; pydantic
    models and dataclasses -> their JSON data)."""
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    data = json_output(value)
    return value if data is value else freeze(data)


def thaw(value: Any) -> Any:
    """The plain JSON data of a :func:`freeze` result."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True, kw_only=True, slots=True)
class ProgressEvent:
    """Where a run is. ``data`` is deep-frozen; :meth:`to_dict` gives plain JSON."""

    run_id: str
    path: str
    runnable: str
    iteration: int
    max_iterations: int
    phase: str
    status: ProgressStatus
    message: str = ""
    data: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if type(self.status) is not ProgressStatus:
            object.__setattr__(self, "status", ProgressStatus(self.status))
        # Events are built every iteration: skip the deep copy when there is no data.
        object.__setattr__(self, "data", _EMPTY if not self.data else freeze(self.data))

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "path": self.path,
            "runnable": self.runnable,
            "iteration": self.iteration,
            "max_iterations": self.max_iterations,
            "phase": self.phase,
            "status": str(self.status),
            "message": self.message,
            "data": {} if self.data is _EMPTY else thaw(self.data),
            "at": self.at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProgressEvent:
        return cls(
            run_id=str(data["run_id"]),
            path=str(data["path"]),
            runnable=str(data["runnable"]),
            iteration=int(data["iteration"]),
            max_iterations=int(data["max_iterations"]),
            phase=str(data["phase"]),
            status=ProgressStatus(data["status"]),
            message=str(data.get("message", "")),
            data=data.get("data") or {},
            at=float(data.get("at", time.time())),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ProgressEvent:
        return cls.from_dict(json.loads(text))

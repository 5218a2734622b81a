"""What a Celery message says about the piece of a workflow it runs.

A :class:`Node` names a *registered* runnable, the run it belongs to, its path
in the workflow, the JSON context spec the worker rebuilds the context from,
and the chain of :class:`Ancestor` values that lets the task that fails report
the failure the way the in-process engine does, at every enclosing level.

Inside a branch of a composite whose policy is ``collect``, a failure is a
value, not an exception: the failing task returns a :func:`failure_marker`
that later tasks pass along until the composite at ``capture`` (its path)
turns it into a failed :class:`~pipelines.BranchResult`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

MARKER_KEY = "__agentloop_failure__"


@dataclass(frozen=True, kw_only=True, slots=True)
class Ancestor:
    """An enclosing pipeline (``position`` = stage index) or composite (``position`` = branch key)."""

    kind: Literal["pipeline", "composite"]
    runnable: str
    path: str
    position: str
    width: int = 0
    fail_fast: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "runnable": self.runnable,
            "path": self.path,
            "position": self.position,
            "width": self.width,
            "fail_fast": self.fail_fast,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ancestor:
        kind = data["kind"]
        if kind not in ("pipeline", "composite"):
            raise ValueError(f"unknown ancestor kind {kind!r}")
        return cls(
            kind=kind,
            runnable=str(data["runnable"]),
            path=str(data["path"]),
            position=str(data["position"]),
            width=int(data.get("width", 0)),
            fail_fast=bool(data.get("fail_fast", True)),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Node:
    run_id: str
    runnable: str
    path: str = ""
    context: Mapping[str, Any] = field(default_factory=dict)
    ancestors: tuple[Ancestor, ...] = ()
    capture: str | None = None  # path of the collecting composite that owns failures, if any

    def child(self, *, runnable: str, segment: str, parent: Ancestor) -> Node:
        path = f"{self.path}/{segment}" if self.path else segment
        capture = self.capture
        if parent.kind == "composite" and not parent.fail_fast:
            capture = parent.path
        return replace(
            self, runnable=runnable, path=path, ancestors=(*self.ancestors, parent), capture=capture
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "runnable": self.runnable,
            "path": self.path,
            "context": dict(self.context),
            "ancestors": [a.to_dict() for a in self.ancestors],
            "capture": self.capture,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Node:
        if not isinstance(data, Mapping):
            raise ValueError("a workflow node must be a JSON object")
        context = data.get("context") or {}
        if not isinstance(context, Mapping):
            raise ValueError("the context spec must be a JSON object")
        return cls(
            run_id=str(data["run_id"]),
            runnable=str(data["runnable"]),
            path=str(data.get("path", "")),
            context=dict(context),
            ancestors=tuple(Ancestor.from_dict(a) for a in data.get("ancestors", ())),
            capture=data.get("capture"),
        )


def failure_marker(*, capture: str, error: BaseException) -> dict[str, Any]:
    return {MARKER_KEY: {"capture": capture, "type": type(error).__name__, "message": str(error)}}


def is_failure_marker(value: Any) -> bool:
    return isinstance(value, dict) and MARKER_KEY in value and len(value) == 1

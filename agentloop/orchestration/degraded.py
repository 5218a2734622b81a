"""The typed shape of a degraded run's result on the wire, for clients that import only Celery.

A run that ended ``degraded`` (model calls failed; the steps returned their fallbacks) answers
``result.get()`` with ``{"__agentloop_degraded__": DegradedBody}``
(:data:`~agentloop.orchestration.wire.DEGRADED_KEY`; :class:`~agentloop.orchestration.wire.DegradedResult`
reads
and writes it). ``status`` is the run record's, the one ``agentloop.progress`` answers;
``error`` is the error the run record keeps.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

__all__ = ["DegradedBody", "DegradedError", "DegradedFailure"]


class DegradedFailure(TypedDict):
    """One model call that failed: the step, why, and where in the workflow."""

    action: str
    reason: str
    path: str


class DegradedError(TypedDict):
    """A degraded run's error, as its run record keeps it (``agentloop.progress``'s ``error``)."""

    type: Literal["ModelUnavailable"]
    message: str
    failures: list[DegradedFailure]


class DegradedBody(TypedDict):
    """What a degraded run's result holds under ``"__agentloop_degraded__"``."""

    status: Literal["degraded"]
    output: Any
    error: DegradedError

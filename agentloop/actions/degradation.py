"""Model failures a step survived: reported as values, so a run can end ``degraded``.

A step never returns a fallback quietly. Each way a step falls back is a
:class:`ModelFailure` reported with :func:`report_model_failure`, and the run
goes on and ends ``degraded``, with the failures recorded:

- a :class:`~actions.ForcedToolAction` whose model call failed after the
  processor's own retries (an HTTP error, a timeout, a reply without the forced
  tool call, arguments that are not a JSON object), or that has no tool schema
  to send, follows its action's :class:`ModelFailurePolicy`: ``"degrade"`` (the
  default) returns the fallback and reports the failure, ``"fail"`` raises
  :class:`ModelUnavailableError` (the run fails);
- an answer still rejected after its tries follows the action's
  ``on_invalid_output``: ``"degrade"`` (the default) returns the fallback and
  reports it, ``"fail"`` raises :class:`InvalidModelOutputError`;
- a raw request (:meth:`actions.ModelRequest.send`) whose reply is a failure
  reports it, and the caller reads the failure from the reply.

A step that reported a failure is never cached: :func:`watch_step` tells the
step cache (:mod:`agentloop.actions.caching`) whether it did.

A report goes to the :class:`DegradationSink` of the enclosing
:func:`use_degradation_sink` block. The run scope (``loops/scope.py``) opens
that block for every runnable inside it with the scope's own sink and path, and
both runners give the root scope a sink: the inline runner and, on Celery, the
workflow engine. Outside any run a report is only logged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.context_binding import Binding

logger = logging.getLogger(__name__)


class ModelFailurePolicy(StrEnum):
    """What a failed model call does to the run: ``degrade`` it (the default) or ``fail`` it."""

    DEGRADE = "degrade"
    FAIL = "fail"


#: A :class:`ModelFailure`'s ``kind``: the model could not be asked or did not answer (an HTTP
#: error, a timeout, no tool schema), or it answered and its answer was not a valid one (arguments
#: that are not a JSON object, no call to the forced tool, arguments the output type or
#: ``normalize`` refused).
UNAVAILABLE, INVALID_OUTPUT = "unavailable", "invalid_output"
#: A :class:`ModelFailure`'s ``kind`` for a tool server outside the process (an MCP server) that
#: was down, too slow, or died in a call: reported like a model outage, the run ends ``degraded``.
TOOL_UNAVAILABLE = "tool_unavailable"


def describe_path(path: str) -> str:
    """A workflow path for people: ``(root)`` for the run's root, else the path quoted."""
    return repr(path) if path else "(root)"


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelFailure:
    """One model call a step could not complete: which action, why, where in the workflow, and
    whether the model was unavailable or answered wrongly (``kind``)."""

    action: str
    reason: str
    path: str = ""
    kind: str = UNAVAILABLE

    def describe(self) -> str:
        """The failure in one line, for people: ``the model was unavailable for ACTION at PATH:
        REASON``, or ``the model gave an invalid answer for ...``."""
        if self.kind == TOOL_UNAVAILABLE:
            where = describe_path(self.path)
            return f"the tool server was unavailable for {self.action} at {where}: {self.reason}"
        what = "gave an invalid answer" if self.kind == INVALID_OUTPUT else "was unavailable"
        return f"the model {what} for {self.action} at {describe_path(self.path)}: {self.reason}"

    def to_dict(self) -> dict[str, str]:
        """As JSON; ``kind`` only for an invalid answer (without it: unavailable, as before it was kept)."""
        data = {"action": self.action, "reason": self.reason, "path": self.path}
        if self.kind != UNAVAILABLE:
            data["kind"] = self.kind
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelFailure:
        return cls(
            action=str(data["action"]),
            reason=str(data["reason"]),
            path=str(data.get("path", "")),
            kind=str(data.get("kind") or UNAVAILABLE),
        )


@runtime_checkable
class DegradationSink(Protocol):
    """Where a run's model failures are reported; ``degraded`` may be ``def`` or ``async def``."""

    def degraded(self, failure: ModelFailure) -> Awaitable[None] | None: ...


_sink: ContextVar[tuple[DegradationSink, str] | None] = ContextVar("agentloop_degradation_sink", default=None)


def use_degradation_sink(
    sink: DegradationSink | None, *, path: str = ""
) -> Binding[tuple[DegradationSink, str] | None]:
    """Report the model failures of steps inside the block to ``sink``, at workflow ``path``."""
    return Binding(_sink, None if sink is None else (sink, path))


class StepWatch:
    """Whether the step running inside :func:`watch_step` reported a failure (``reason``)."""

    def __init__(self, parent: StepWatch | None) -> None:
        self.parent, self.reason = parent, ""


_watch: ContextVar[StepWatch | None] = ContextVar("agentloop_step_watch", default=None)


@contextmanager
def watch_step() -> Iterator[StepWatch]:
    """Watch the step run inside the block: its watch's ``reason`` says why it must not be kept
    (a failure it, or a step inside it, reported), empty when it reported none."""
    watch = StepWatch(_watch.get())
    token = _watch.set(watch)
    try:
        yield watch
    finally:
        _watch.reset(token)


async def report_model_failure(*, action: str, reason: str, kind: str = UNAVAILABLE) -> ModelFailure:
    """Report that ``action`` fell back (logged, and told to the run's sink if any): the run ends
    ``degraded``, and neither the step nor a cached step around it is kept (:func:`watch_step`).
    ``kind`` says why: the model was unavailable, or its answer was invalid (:data:`INVALID_OUTPUT`)."""
    watch = _watch.get()
    while watch is not None:
        watch.reason = watch.reason or reason
        watch = watch.parent
    bound = _sink.get()
    failure = ModelFailure(action=action, reason=reason, path="" if bound is None else bound[1], kind=kind)
    logger.warning("%s", failure.describe())
    if bound is not None:
        await maybe_await(bound[0].degraded(failure))
    return failure

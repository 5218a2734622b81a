"""Token usage accounting and budgets, seen from inside a step.

Every model call the core makes (a forced tool call, an AI-driven turn) first
asks :func:`check_budget` and then hands the response's usage to
:func:`report_usage`. Both talk to the :class:`UsageMeter` of the running
step, which a runner installs with :func:`use_meter`: in-process an
:class:`InMemoryUsageMeter`; on Celery a meter that sums usage per run in the
run store, shared by every task and worker of the run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol, runtime_checkable

from actions.errors import AgentLoopError
from actions.model import Usage


class TokenBudgetExceededError(AgentLoopError):
    """The run's token budget is spent; the step that hit it ends with this status."""

    status = "budget_exceeded"

    def __init__(self, *, used: int, budget: int) -> None:
        self.used, self.budget = used, budget
        super().__init__(f"token budget exceeded: {used} of {budget} tokens used")


@runtime_checkable
class UsageMeter(Protocol):
    """Where a run's token usage is summed and its budget enforced (see :func:`use_meter`)."""

    def check(self) -> None:
        """Raise :class:`TokenBudgetExceededError` when no budget is left."""

    def record(self, usage: Usage) -> None:
        """Add ``usage``; raise :class:`TokenBudgetExceededError` when it passed the budget."""


class InMemoryUsageMeter:
    """Sums usage in this process; ``budget`` (total tokens) is optional."""

    def __init__(self, *, budget: int | None = None) -> None:
        self.budget = budget
        self.usage = Usage()
        self._lock = threading.Lock()

    def check(self) -> None:
        if self.budget is not None and self.usage.total_tokens >= self.budget:
            raise TokenBudgetExceededError(used=self.usage.total_tokens, budget=self.budget)

    def record(self, usage: Usage) -> None:
        with self._lock:
            self.usage = self.usage + usage
        if self.budget is not None and self.usage.total_tokens > self.budget:
            raise TokenBudgetExceededError(used=self.usage.total_tokens, budget=self.budget)


_meter: ContextVar[UsageMeter | None] = ContextVar("agentloop_usage_meter", default=None)


@contextmanager
def use_meter(meter: UsageMeter | None) -> Iterator[UsageMeter | None]:
    """Meter every model call made inside the block with ``meter``."""
    token = _meter.set(meter)
    try:
        yield meter
    finally:
        _meter.reset(token)


def current_meter() -> UsageMeter | None:
    """The meter of the enclosing :func:`use_meter` block, or ``None`` outside one."""
    return _meter.get()


def check_budget() -> None:
    """Before a model call: raise when the run's budget is spent."""
    meter = _meter.get()
    if meter is not None:
        meter.check()


def report_usage(usage: Usage) -> None:
    """After a model call: account for its usage."""
    meter = _meter.get()
    if meter is not None:
        meter.record(usage)

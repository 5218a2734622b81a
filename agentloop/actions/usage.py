"""Token usage accounting and budgets, seen from inside a step.

Every model call is metered at one place, :func:`metered_turn`, where the call returns: the
processor protocol's entry point (``ModelRequest.forward``, which a forced tool call, an
AI-driven turn and ``ModelRequest.send`` all go through) and every processor built on
``BaseProcessor`` (OpenAI, Anthropic, the offline model, wrappers, test doubles) wrap their call
in it. Before the call it asks :func:`check_budget`; after it, the response's usage goes to
:func:`report_usage`, once: when a call passes through several processors (a wrapper and the
one it wraps), the innermost counts it. Both talk to the :class:`UsageMeter` of the running
step, which a runner installs with :func:`use_meter`: in-process an
:class:`InMemoryUsageMeter`; on Celery a meter that sums usage per run in the
run store, shared by every task and worker of the run.

A meter may also count the run's step-cache use (``actions/caching.py``): a meter with a
``record_cache`` method hears each cache hit (with the tokens it saved) and miss through
:func:`report_cache_use`; :class:`InMemoryUsageMeter` sums them in :attr:`InMemoryUsageMeter.cache`.
Likewise a meter with a ``record_tool_call`` method hears each tool call an MCP server was asked
(``orchestration/mcp/tools.py``) through :func:`report_tool_call`, summed in
:attr:`InMemoryUsageMeter.tool_calls`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar, runtime_checkable

from agentloop.actions.context_binding import Binding
from agentloop.actions.errors import TokenBudgetExceededError

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    """Token usage of one model turn (or a sum of turns)."""

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Usage:
        return cls(
            input_tokens=int(data.get("input_tokens", 0)),
            output_tokens=int(data.get("output_tokens", 0)),
        )


@runtime_checkable
class UsageMeter(Protocol):
    """Where a run's token usage is summed and its budget enforced (see :func:`use_meter`)."""

    def check(self) -> None:
        """Raise :class:`TokenBudgetExceededError` when no budget is left."""

    def record(self, usage: Usage) -> None:
        """Add ``usage``; raise :class:`TokenBudgetExceededError` when it passed the budget."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CacheUsage:
    """A run's step-cache use: ``hits``, ``misses``, and the tokens the hits saved (``tokens_saved``:
    what the cached results had cost when they were computed)."""

    hits: int = 0
    misses: int = 0
    tokens_saved: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"cache_hits": self.hits, "cache_misses": self.misses, "tokens_saved": self.tokens_saved}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CacheUsage:
        return cls(
            hits=int(data.get("cache_hits", 0)),
            misses=int(data.get("cache_misses", 0)),
            tokens_saved=int(data.get("tokens_saved", 0)),
        )


class InMemoryUsageMeter:
    """Sums usage (and step-cache use) in this process; ``budget`` (total tokens) is optional."""

    def __init__(self, *, budget: int | None = None) -> None:
        self.budget = budget
        self.usage = Usage()
        self.cache = CacheUsage()
        self.tool_calls = 0
        self._lock = threading.Lock()

    def record_tool_call(self) -> None:
        """Count one MCP tool call."""
        with self._lock:
            self.tool_calls += 1

    def record_cache(self, *, hit: bool, tokens_saved: int = 0) -> None:
        """Count one step-cache hit (with the tokens it saved) or miss."""
        with self._lock:
            hits, misses = self.cache.hits + int(hit), self.cache.misses + int(not hit)
            saved = self.cache.tokens_saved + (tokens_saved if hit else 0)
            self.cache = replace(self.cache, hits=hits, misses=misses, tokens_saved=saved)

    def check(self) -> None:
        if self.budget is not None and self.usage.total_tokens >= self.budget:
            raise TokenBudgetExceededError(used=self.usage.total_tokens, budget=self.budget)

    def record(self, usage: Usage) -> None:
        with self._lock:
            self.usage = self.usage + usage
        if self.budget is not None and self.usage.total_tokens > self.budget:
            raise TokenBudgetExceededError(used=self.usage.total_tokens, budget=self.budget)


_meter: ContextVar[UsageMeter | None] = ContextVar("agentloop_usage_meter", default=None)


def use_meter(meter: UsageMeter | None) -> Binding[UsageMeter | None]:
    """Meter every model call made inside the block with ``meter``."""
    return Binding(_meter, meter)


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


class _Spending(Protocol):
    @property
    def usage(self) -> Usage: ...


Reply = TypeVar("Reply", bound=_Spending)


@dataclass
class _Turn:
    """One metered model call in progress: whether a call inside it (a wrapped processor's) counted."""

    counted: bool = False


_turn: ContextVar[_Turn | None] = ContextVar("agentloop_metered_turn", default=None)


async def metered_turn(send: Callable[[], Awaitable[Reply]]) -> Reply:
    """``send()``, one model call, counted against the run (module doc): :func:`check_budget`
    first (a spent budget raises :class:`TokenBudgetExceededError` and nothing is sent), then
    the reply's usage to :func:`report_usage` (which raises once the call passed the budget),
    unless a metered call inside this one (the processor a wrapper passed the turn to) counted it."""
    check_budget()
    outer, turn = _turn.get(), _Turn()
    token = _turn.set(turn)
    try:
        response = await send()
    finally:
        _turn.reset(token)
        if outer is not None and turn.counted:
            outer.counted = True
    if outer is not None:
        outer.counted = True
    if not turn.counted:
        report_usage(response.usage)
    return response


def report_cache_use(*, hit: bool, tokens_saved: int = 0) -> None:
    """A cached step hit (saving ``tokens_saved``) or missed: told to the meter when it counts
    cache use (a ``record_cache`` method); counting is observation, so a failing meter is logged."""
    record = getattr(_meter.get(), "record_cache", None)
    if record is None:
        return
    try:
        record(hit=hit, tokens_saved=tokens_saved)
    except Exception:
        logger.warning(
            "the usage meter failed to count a step-cache %s", "hit" if hit else "miss", exc_info=True
        )


def report_tool_call() -> None:
    """An MCP server was asked for a tool call (it answered, or failed): told to the meter when it
    counts tool calls (a ``record_tool_call`` method); counting is observation, so a failing meter
    is logged."""
    record = getattr(_meter.get(), "record_tool_call", None)
    if record is None:
        return
    try:
        record()
    except Exception:
        logger.warning("the usage meter failed to count a tool call", exc_info=True)

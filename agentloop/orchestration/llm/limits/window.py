"""The fixed-window rate limit: one algorithm over interchangeable counter backends.

A provider (OpenAI, or an OpenAI-compatible server) limits an account to so
many requests and so many tokens per minute. :class:`WindowRateLimiter` holds
that limit; where its counters live is its backend:
:class:`~agentloop.orchestration.llm.limits.backends.memory.MemoryBackend` (this process)
or :class:`~agentloop.orchestration.llm.limits.backends.redis.RedisBackend` (every
process that uses the same Redis and key)::

    limiter = WindowRateLimiter(
        RedisBackend("redis://localhost:6379/0"),
        key=limit_key("gpt-4o-mini"),
        requests_per_minute=500,
        tokens_per_minute=200_000,
    )

How a call is limited:

- Time is cut into **fixed windows** (``window``, one minute by default) that
  every process agrees on: window ``i`` covers ``[i * window, (i + 1) * window)``
  of the backend's clock (the Redis server's clock for the Redis backend, so
  workers on different machines agree even when their clocks drift).
  The limits count per window: with the default window they are per minute;
  with a shorter window (tests) the same counts apply to each shorter window.
- Before the call, the limiter takes a **request slot** of the current
  window, granted only while fewer than ``requests_per_minute`` slots were
  taken in it *and* fewer than ``tokens_per_minute`` tokens were recorded in
  it. Both checks and the increment are one atomic step of the backend (a Lua
  script on Redis; a lock in memory), so concurrent callers on any number of
  processes never get more than ``requests_per_minute`` slots in one window.
- When the window is exhausted the caller sleeps (``asyncio.sleep``, so a
  deadline or a cancellation interrupts it) until the next window and asks
  again. A caller that *would* wait longer than ``max_wait`` in total does not
  wait at all: :class:`RateLimitTimeoutError` is raised at once.
- After the call, its token usage (input + output) is recorded in the window
  current at that moment. Token counts are only known after a call, so the
  token limit stops calls from *starting* once the window's tokens reached it;
  calls already in flight may take the window past it.

A backend that cannot reach its store grants an unchecked :class:`Permit`
(``enforced=False``) rather than failing the call: see
:mod:`agentloop.orchestration.llm.limits.backends.redis`.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from agentloop.orchestration.errors import DenialReason, RateLimitTimeoutError

__all__ = [
    "DEFAULT_KEY_PREFIX",
    "DEFAULT_MAX_WAIT",
    "DEFAULT_WINDOW",
    "Denial",
    "Permit",
    "WindowBackend",
    "WindowRateLimiter",
    "duration_seconds",
    "limit_key",
]

DEFAULT_WINDOW = timedelta(minutes=1)
DEFAULT_MAX_WAIT = timedelta(minutes=2)
DEFAULT_KEY_PREFIX = "agentloop:ratelimit:"
_MIN_SLEEP = 0.001


def limit_key(name: str) -> str:
    """The key of the limit called ``name``: ``agentloop:ratelimit:<name>``."""
    if not name:
        raise ValueError("a rate limit needs a non-empty name")
    return DEFAULT_KEY_PREFIX + name


def duration_seconds(value: timedelta | float, what: str) -> float:
    """``value`` in seconds; ``ValueError`` naming ``what`` unless it is finite and not negative."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{what} must be a non-negative duration, not {value!r}")
    return seconds


def _limit(value: int | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{what} must be a positive integer or None, not {value!r}")
    return value


@dataclass(frozen=True, kw_only=True, slots=True)
class Permit:
    """A request slot: the call may go ahead.

    ``window`` is the index of the fixed window the slot was counted in,
    ``requests`` the slots taken in it so far (this one included), ``tokens``
    the tokens recorded in it when the slot was taken, ``waited`` the seconds
    spent waiting for it. ``enforced`` is ``False`` when the backend was
    unavailable and the call went ahead unchecked (``window`` is then ``-1``).
    """

    window: int
    requests: int
    tokens: int
    waited: float = 0.0
    enforced: bool = True


@dataclass(frozen=True, kw_only=True, slots=True)
class Denial:
    """No slot in window ``window``: its ``reason`` limit is spent; it ends in ``retry_after`` s."""

    window: int
    reason: DenialReason
    retry_after: float


class WindowBackend(Protocol):
    """Where the counters of fixed windows live; each method is one atomic step.

    ``window`` is the window's length in seconds; the backend's clock says
    which window is current. ``take_slot`` never raises for an unreachable
    store: it grants an unchecked permit (``enforced=False``) instead.
    """

    async def take_slot(
        self, key: str, *, window: float, max_requests: int | None, max_tokens: int | None
    ) -> Permit | Denial:
        """A slot of the current window unless ``max_requests`` slots or ``max_tokens`` tokens are spent."""
        ...

    async def add_tokens(self, key: str, *, window: float, tokens: int) -> None:
        """Add ``tokens`` to the current window's count."""
        ...

    def usage(self, key: str, *, window: float) -> tuple[int, int, int]:
        """``(window index, requests, tokens)`` of the current window."""
        ...

    def describe(self, key: str) -> str:
        """Where the limit ``key`` is counted, for display (never a password)."""
        ...

    def close(self) -> None:
        """Let go of connections (they reopen on next use)."""
        ...


class WindowRateLimiter:
    """A requests and/or tokens limit per fixed window, counted in ``backend`` under ``key``.

    Every limiter with the same backend store and ``key`` shares one limit.
    ``max_wait`` is the longest :meth:`acquire` waits for a slot by default.
    """

    def __init__(
        self,
        backend: WindowBackend,
        *,
        key: str = limit_key("default"),
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        window: timedelta | float = DEFAULT_WINDOW,
        max_wait: timedelta | float = DEFAULT_MAX_WAIT,
    ) -> None:
        if not key:
            raise ValueError("a rate limit needs a non-empty key")
        self.backend = backend
        self.key = key
        self.requests_per_minute = _limit(requests_per_minute, "requests_per_minute")
        self.tokens_per_minute = _limit(tokens_per_minute, "tokens_per_minute")
        if self.requests_per_minute is None and self.tokens_per_minute is None:
            raise ValueError("give requests_per_minute and/or tokens_per_minute")
        self.window = duration_seconds(window, "window")
        if self.window < 0.001:
            raise ValueError(f"window must be at least 1 ms, not {window!r}")
        self.max_wait = duration_seconds(max_wait, "max_wait")

    async def try_acquire(self) -> Permit | Denial:
        """One attempt, no waiting: a slot of the current window, or why there is none."""
        return await self.backend.take_slot(
            self.key,
            window=self.window,
            max_requests=self.requests_per_minute,
            max_tokens=self.tokens_per_minute,
        )

    async def acquire(self, *, max_wait: timedelta | float | None = None) -> Permit:
        """A slot of the current window, or of a later one after sleeping until it starts.

        Raises :class:`RateLimitTimeoutError`, without sleeping in vain, as soon
        as the next window starts later than ``max_wait`` (default: the
        limiter's) after the first attempt.
        """
        budget = self.max_wait if max_wait is None else duration_seconds(max_wait, "max_wait")
        started = time.monotonic()
        while True:
            outcome = await self.try_acquire()
            waited = time.monotonic() - started
            if isinstance(outcome, Permit):
                return Permit(
                    window=outcome.window,
                    requests=outcome.requests,
                    tokens=outcome.tokens,
                    waited=waited,
                    enforced=outcome.enforced,
                )
            retry_after = max(outcome.retry_after, _MIN_SLEEP)
            if waited + retry_after > budget:
                raise RateLimitTimeoutError(
                    f"no request slot within max_wait {budget:g}s: the {outcome.reason} limit "
                    f"({self.describe_limits()}) is spent until the next window, "
                    f"{retry_after:.3g}s away (waited {waited:.3g}s)",
                    waited=waited,
                    max_wait=budget,
                    reason=outcome.reason,
                )
            # a little jitter so the callers that waited do not all ask in the same millisecond
            jitter = random.uniform(0.0, min(0.02 * self.window, 0.25))
            await asyncio.sleep(min(retry_after + jitter, budget - waited))

    async def record(self, tokens: int) -> None:
        """Add a finished call's tokens to the current window (nothing to count without a token limit)."""
        if tokens > 0 and self.tokens_per_minute is not None:
            await self.backend.add_tokens(self.key, window=self.window, tokens=int(tokens))

    def usage(self) -> tuple[int, int, int]:
        """``(window, requests, tokens)`` of the current window."""
        return self.backend.usage(self.key, window=self.window)

    def close(self) -> None:
        """Close the backend's connections (they reopen on next use)."""
        self.backend.close()

    def describe_limits(self) -> str:
        """The limits, e.g. ``30 requests and 9000 tokens per 60s window``."""
        parts = []
        if self.requests_per_minute is not None:
            parts.append(f"{self.requests_per_minute} requests")
        if self.tokens_per_minute is not None:
            parts.append(f"{self.tokens_per_minute} tokens")
        return f"{' and '.join(parts)} per {self.window:g}s window"

    def describe(self) -> str:
        """The limits and where they are counted, for display (never a password)."""
        return f"{self.describe_limits()}, {self.backend.describe(self.key)}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"

"""Provider rate limits shared by every worker: requests and tokens per window.

A provider (OpenAI, or an OpenAI-compatible server) limits an account to so
many requests and so many tokens per minute. When several worker processes
call the same account, each one backing off on its own 429s wastes calls;
:class:`RateLimitedProcessor` instead asks a limiter shared by all of them
before every model call::

    limiter = RedisRateLimiter(
        "redis://localhost:6379/0",
        key=limit_key("gpt-4o-mini"),
        requests_per_minute=500,
        tokens_per_minute=200_000,
    )
    processor = RateLimitedProcessor(OpenAIProcessor.from_env(), limiter)

How a call is limited:

- Time is cut into **fixed windows** (``window``, one minute by default) that
  every process agrees on: window ``i`` covers ``[i * window, (i + 1) * window)``
  of the clock (the Redis server's clock for :class:`RedisRateLimiter`, so
  workers on different machines agree even when their clocks drift).
  The limits count per window: with the default window they are per minute;
  with a shorter window (tests) the same counts apply to each shorter window.
- Before the call, the processor takes a **request slot** of the current
  window, granted only while fewer than ``requests_per_minute`` slots were
  taken in it *and* fewer than ``tokens_per_minute`` tokens were recorded in
  it. Both checks and the increment are one atomic step (a Lua script on
  Redis; a lock in-process), so concurrent callers on any number of processes
  never get more than ``requests_per_minute`` slots in one window.
- When the window is exhausted the caller sleeps (``asyncio.sleep``, so a
  deadline or a cancellation interrupts it) until the next window and asks
  again. A caller that *would* wait longer than ``max_wait`` in total does not
  wait at all: the call returns :meth:`AiResponse.failure` saying so, which an
  action treats as any other model fault.
- After the call, the response's token usage (input + output) is recorded in
  the window current at that moment. Token counts are only known after a
  call, so the token limit stops calls from *starting* once the window's
  tokens reached it; calls already in flight may take the window past it.
- Retries the SDK makes inside one call (429, 5xx) are not counted as extra
  requests; lower ``OPENAI_MAX_RETRIES`` when that matters.

Failure choice: **a limiter that cannot reach Redis lets the call proceed.**
A Redis error (down, timeout, a script error) is logged as a warning (at most
once per ``log_interval`` seconds per limiter, the rest at debug level) and
the call goes ahead unlimited, its :class:`Permit` marked ``enforced=False``.
An outage of the limiter's store must not stop every agent of a deployment;
the provider's own 429s, which the OpenAI processor retries with backoff,
remain the backstop. Every Redis operation has a socket timeout, so the
limiter never blocks for long; after a failure it does not ask Redis again for
``retry_interval`` seconds (calls proceed meanwhile); and the wait for a slot
is bounded by ``max_wait``: nothing here blocks forever.

:class:`LocalRateLimiter` is the same thing inside one process (a thread
lock; for the embedded defaults and single-process deployments).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable
from urllib.parse import urlsplit

from actions.errors import AgentLoopError
from actions.model import AiResponse

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_KEY_PREFIX",
    "DEFAULT_MAX_WAIT",
    "DEFAULT_WINDOW",
    "Denial",
    "LocalRateLimiter",
    "Permit",
    "RateLimitTimeoutError",
    "RateLimitedProcessor",
    "RateLimiter",
    "current_permit",
    "limit_key",
    "redact_url",
]

DEFAULT_WINDOW = timedelta(minutes=1)
DEFAULT_MAX_WAIT = timedelta(minutes=2)
DEFAULT_KEY_PREFIX = "agentloop:ratelimit:"
_DEFAULT_REDIS_TIMEOUT = 2.0  # seconds, for connecting and for each Redis command
_MIN_SLEEP = 0.001

DenialReason = Literal["requests", "tokens"]


def limit_key(name: str) -> str:
    """The Redis key prefix of the limit called ``name``: ``agentloop:ratelimit:<name>``."""
    if not name:
        raise ValueError("a rate limit needs a non-empty name")
    return DEFAULT_KEY_PREFIX + name


def redact_url(url: str) -> str:
    """``url`` without its user, password, query and fragment (for logs and display)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "<unparsable url>"
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{port}{parts.path}" if parts.scheme else host + port + parts.path


@dataclass(frozen=True, kw_only=True, slots=True)
class Permit:
    """A request slot: the call may go ahead.

    ``window`` is the index of the fixed window the slot was counted in,
    ``requests`` the slots taken in it so far (this one included), ``tokens``
    the tokens recorded in it when the slot was taken, ``waited`` the seconds
    spent waiting for it. ``enforced`` is ``False`` when the limiter was
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


class RateLimitTimeoutError(AgentLoopError, TimeoutError):
    """Getting a slot would take longer than ``max_wait``."""

    def __init__(self, message: str, *, waited: float, max_wait: float, reason: DenialReason) -> None:
        self.waited, self.max_wait, self.reason = waited, max_wait, reason
        super().__init__(message)


@runtime_checkable
class RateLimiter(Protocol):
    """What :class:`RateLimitedProcessor` needs from a limiter.

    ``acquire`` returns a :class:`Permit` (possibly after waiting) or raises
    :class:`RateLimitTimeoutError`; ``record`` adds a call's tokens. Neither
    raises anything else: a limiter that cannot do its job lets calls proceed.
    """

    async def acquire(self, *, max_wait: timedelta | float | None = None) -> Permit: ...

    async def record(self, tokens: int) -> None: ...

    def describe(self) -> str: ...


def _seconds(value: timedelta | float, what: str) -> float:
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


class _WindowLimiter:
    """The shared part: configuration, the waiting loop, the display."""

    kind = "limiter"

    def __init__(
        self,
        *,
        key: str,
        requests_per_minute: int | None,
        tokens_per_minute: int | None,
        window: timedelta | float,
        max_wait: timedelta | float,
    ) -> None:
        if not key:
            raise ValueError("a rate limit needs a non-empty key")
        self.key = key
        self.requests_per_minute = _limit(requests_per_minute, "requests_per_minute")
        self.tokens_per_minute = _limit(tokens_per_minute, "tokens_per_minute")
        if self.requests_per_minute is None and self.tokens_per_minute is None:
            raise ValueError("give requests_per_minute and/or tokens_per_minute")
        self.window = _seconds(window, "window")
        if self.window < 0.001:
            raise ValueError(f"window must be at least 1 ms, not {window!r}")
        self.max_wait = _seconds(max_wait, "max_wait")

    async def try_acquire(self) -> Permit | Denial:
        """One attempt, no waiting: a slot of the current window, or why there is none."""
        raise NotImplementedError

    async def record(self, tokens: int) -> None:
        """Add a finished call's tokens to the current window."""
        raise NotImplementedError

    async def acquire(self, *, max_wait: timedelta | float | None = None) -> Permit:
        """A slot of the current window, or of a later one after sleeping until it starts.

        Raises :class:`RateLimitTimeoutError`, without sleeping in vain, as soon
        as the next window starts later than ``max_wait`` (default: the
        limiter's) after the first attempt.
        """
        budget = self.max_wait if max_wait is None else _seconds(max_wait, "max_wait")
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

    def describe_limits(self) -> str:
        parts = []
        if self.requests_per_minute is not None:
            parts.append(f"{self.requests_per_minute} requests")
        if self.tokens_per_minute is not None:
            parts.append(f"{self.tokens_per_minute} tokens")
        return f"{' and '.join(parts)} per {self.window:g}s window"

    def describe(self) -> str:
        return f"{self.describe_limits()}, {self.kind} {self.key}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"


class LocalRateLimiter(_WindowLimiter):
    """The limiter inside one process: fixed windows of ``clock`` (``time.monotonic``).

    Safe to share between threads and event loops (a lock guards every
    update and nothing awaits while holding it).
    """

    kind = "in-process"

    def __init__(
        self,
        *,
        key: str = limit_key("default"),
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        window: timedelta | float = DEFAULT_WINDOW,
        max_wait: timedelta | float = DEFAULT_MAX_WAIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            key=key,
            requests_per_minute=requests_per_minute,
            tokens_per_minute=tokens_per_minute,
            window=window,
            max_wait=max_wait,
        )
        self._clock = clock
        self._lock = threading.Lock()
        self._index = -1
        self._requests = 0
        self._tokens = 0

    def _roll(self) -> tuple[int, float]:
        """Move to the current window (caller holds the lock); returns it and the seconds it has left."""
        now = self._clock()
        index = math.floor(now / self.window)
        if index != self._index:
            self._index, self._requests, self._tokens = index, 0, 0
        return index, (index + 1) * self.window - now

    async def try_acquire(self) -> Permit | Denial:
        with self._lock:
            index, left = self._roll()
            if self.tokens_per_minute is not None and self._tokens >= self.tokens_per_minute:
                return Denial(window=index, reason="tokens", retry_after=left)
            if self.requests_per_minute is not None and self._requests >= self.requests_per_minute:
                return Denial(window=index, reason="requests", retry_after=left)
            self._requests += 1
            return Permit(window=index, requests=self._requests, tokens=self._tokens)

    async def record(self, tokens: int) -> None:
        if tokens <= 0:
            return
        with self._lock:
            self._roll()
            self._tokens += int(tokens)

    def usage(self) -> tuple[int, int, int]:
        """``(window, requests, tokens)`` of the current window."""
        with self._lock:
            index, _ = self._roll()
            return index, self._requests, self._tokens


_permit: ContextVar[Permit | None] = ContextVar("agentloop_rate_limit_permit", default=None)


def current_permit() -> Permit | None:
    """The :class:`Permit` of the rate-limited model call in progress (for logging and tracing)."""
    return _permit.get()


class RateLimitedProcessor:
    """A model processor that asks ``limiter`` for a slot before each call of ``inner``.

    Implements the processor protocol. A call that would wait longer than
    ``max_wait`` (default: the limiter's) for a slot returns
    :meth:`AiResponse.failure` without calling ``inner``; after a call, the
    response's usage is recorded with the limiter. While ``inner`` runs,
    :func:`current_permit` returns the call's permit. A limiter that fails
    unexpectedly is logged and the call proceeds.
    """

    def __init__(
        self, inner: Any, limiter: RateLimiter, *, max_wait: timedelta | float | None = None
    ) -> None:
        if not callable(getattr(inner, "send_request", None)):
            raise TypeError(f"{inner!r} is not a model processor (it has no send_request)")
        self.inner = inner
        self.limiter = limiter
        self.max_wait = None if max_wait is None else _seconds(max_wait, "max_wait")

    @property
    def model(self) -> str:
        """The inner processor's model name, when it has one."""
        return str(getattr(self.inner, "model", None) or getattr(self.inner, "model_name", "") or "")

    async def send_request(
        self,
        *,
        instruction: str,
        tools: Sequence[Mapping[str, Any]],
        tool_choices: Sequence[Mapping[str, Any]] | None,
        history_messages: Sequence[Mapping[str, Any]],
        documents: Sequence[Any],
        files: Sequence[Any],
        is_auto_handle_function_call: bool,
    ) -> AiResponse:
        permit: Permit | None
        try:
            permit = await self.limiter.acquire(max_wait=self.max_wait)
        except RateLimitTimeoutError as error:
            logger.warning("rate limit: %s", error)
            return AiResponse.failure(f"rate limit: {error}", model=self.model)
        except Exception:  # a limiter must not turn into a model fault: proceed unlimited
            logger.warning("rate limiter %r failed; the call proceeds unlimited", self.limiter, exc_info=True)
            permit = None
        if permit is not None and permit.waited > 0.001:
            logger.debug("rate limit: waited %.3fs for a slot in window %d", permit.waited, permit.window)
        token = _permit.set(permit)
        try:
            response: AiResponse = await self.inner.send_request(
                instruction=instruction,
                tools=tools,
                tool_choices=tool_choices,
                history_messages=history_messages,
                documents=documents,
                files=files,
                is_auto_handle_function_call=is_auto_handle_function_call,
            )
        finally:
            _permit.reset(token)
        try:
            await self.limiter.record(response.usage.total_tokens)
        except Exception:
            logger.warning("rate limiter %r could not record usage", self.limiter, exc_info=True)
        return response

    async def aclose(self) -> None:
        """Close the inner processor, when it can be closed."""
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()

    def __repr__(self) -> str:
        return f"<RateLimitedProcessor {self.inner!r} limited by {self.limiter!r}>"


def __getattr__(name: str) -> Any:
    """``RedisRateLimiter`` lives in :mod:`orchestration.llm.redis_limits` (it needs redis-py)."""
    if name == "RedisRateLimiter":
        from orchestration.llm.redis_limits import RedisRateLimiter

        return RedisRateLimiter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

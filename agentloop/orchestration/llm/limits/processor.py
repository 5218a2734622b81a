"""``RateLimitedProcessor``: a model processor that asks a limiter for a slot before each call."""

from __future__ import annotations

import logging
from contextvars import ContextVar
from datetime import timedelta
from typing import Protocol, runtime_checkable

from agentloop.actions.model import AiResponse, ModelProcessor, ModelRequest
from agentloop.orchestration.errors import RateLimitTimeoutError
from agentloop.orchestration.interruptions import reraise_interruption
from agentloop.orchestration.llm.base import BaseProcessor
from agentloop.orchestration.llm.limits.window import Permit, duration_seconds

logger = logging.getLogger(__name__)

__all__ = ["RateLimitedProcessor", "RateLimiter", "current_permit"]


@runtime_checkable
class RateLimiter(Protocol):
    """What :class:`RateLimitedProcessor` needs from a limiter
    (:class:`~agentloop.orchestration.llm.limits.window.WindowRateLimiter` is one).

    ``acquire`` returns a :class:`Permit` (possibly after waiting) or raises
    :class:`RateLimitTimeoutError`; ``record`` adds a call's tokens. Neither
    raises anything else: a limiter that cannot do its job lets calls proceed.
    """

    async def acquire(self, *, max_wait: timedelta | float | None = None) -> Permit: ...

    async def record(self, tokens: int) -> None: ...

    def describe(self) -> str: ...


_permit: ContextVar[Permit | None] = ContextVar("agentloop_rate_limit_permit", default=None)


def current_permit() -> Permit | None:
    """The :class:`Permit` of the rate-limited model call in progress (for logging and tracing)."""
    return _permit.get()


class RateLimitedProcessor(BaseProcessor):
    """A model processor that asks ``limiter`` for a slot before each call of ``inner``.

    A call that would wait longer than ``max_wait`` (default: the limiter's)
    for a slot returns :meth:`AiResponse.failure` without calling ``inner``;
    after a call, the response's usage is recorded with the limiter. While
    ``inner`` runs, :func:`current_permit` returns the call's permit. A limiter
    that fails unexpectedly is logged and the call proceeds.
    """

    def __init__(
        self, inner: ModelProcessor, limiter: RateLimiter, *, max_wait: timedelta | float | None = None
    ) -> None:
        if not callable(getattr(inner, "send_request", None)):
            raise TypeError(f"{inner!r} is not a model processor (it has no send_request)")
        self.inner = inner
        self.limiter = limiter
        self.max_wait = None if max_wait is None else duration_seconds(max_wait, "max_wait")

    @property
    def model(self) -> str:
        """The inner processor's model name, when it has one."""
        return str(getattr(self.inner, "model", None) or getattr(self.inner, "model_name", "") or "")

    async def process(self, request: ModelRequest) -> AiResponse:
        permit: Permit | None
        try:
            permit = await self.limiter.acquire(max_wait=self.max_wait)
        except RateLimitTimeoutError as error:
            logger.warning("rate limit: %s", error)
            return AiResponse.failure(f"rate limit: {error}", model=self.model)
        except Exception as error:  # a limiter must not turn into a model fault: proceed unlimited
            reraise_interruption(error)
            logger.warning("rate limiter %r failed; the call proceeds unlimited", self.limiter, exc_info=True)
            permit = None
        if permit is not None and permit.waited > 0.001:
            logger.debug("rate limit: waited %.3fs for a slot in window %d", permit.waited, permit.window)
        token = _permit.set(permit)
        try:
            response = await request.forward(self.inner)
        finally:
            _permit.reset(token)
        try:
            await self.limiter.record(response.usage.total_tokens)
        except Exception as error:
            reraise_interruption(error)
            logger.warning("rate limiter %r could not record usage", self.limiter, exc_info=True)
        return response

    async def aclose(self) -> None:
        """Close the inner processor, when it can be closed."""
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()

    def __repr__(self) -> str:
        return f"<RateLimitedProcessor {self.inner!r} limited by {self.limiter!r}>"

"""Per-key rate limits and token budgets: each concurrency key's model calls limited on top of the
provider's shared limit (``docs/how-to/fairness.md``).

:class:`KeyedRateLimiter` is a :class:`~agentloop.orchestration.llm.limits.processor.RateLimiter`
whose limit depends on the run making the call (its concurrency key,
``fairness/current.py``): every key gets its own requests and tokens per window
(``AGENTLOOP_MODEL_KEY_RPM`` / ``_TPM``) and its own token budget per period
(``AGENTLOOP_MODEL_KEY_TOKEN_BUDGET`` tokens per ``AGENTLOOP_MODEL_KEY_BUDGET_SECONDS``, a day by
default), counted in the same backend as the provider's limit (Redis: shared by every worker) under
``agentloop:ratelimit:<name>:key:<key>``. A call of a run without a key is not limited here. A key
whose budget is spent waits for nothing: the call fails at once (``RateLimitTimeoutError`` as a
model failure, so its run says it degraded), as the shared limiter does past ``max_wait``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import timedelta

from agentloop.orchestration.fairness.current import current_key
from agentloop.orchestration.llm.limits.window import Permit, WindowBackend, WindowRateLimiter, limit_key

__all__ = ["KeyedRateLimiter"]

#: How many keys' limiters one process keeps (the least recently used go; their counts stay in
#: the backend).
MAX_CACHED_KEYS = 1000


class KeyedRateLimiter:
    """Each concurrency key's own limits, in ``backend`` under ``name`` (see the module doc)."""

    def __init__(
        self,
        backend: WindowBackend,
        *,
        name: str,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        window: float = 60.0,
        max_wait: float = 120.0,
        token_budget: int | None = None,
        budget_period: float = 86400.0,
    ) -> None:
        if requests_per_minute is None and tokens_per_minute is None and token_budget is None:
            raise ValueError("give a per-key requests or tokens limit, or a per-key token budget")
        self.backend, self.name = backend, name
        self.requests_per_minute, self.tokens_per_minute = requests_per_minute, tokens_per_minute
        self.window, self.max_wait = window, max_wait
        self.token_budget, self.budget_period = token_budget, budget_period
        self._limiters: OrderedDict[str, list[WindowRateLimiter]] = OrderedDict()
        self._lock = threading.Lock()

    def limiters(self, key: str) -> list[WindowRateLimiter]:
        """The limiters of ``key``: its window limit, then its budget (each only when set)."""
        with self._lock:
            found = self._limiters.get(key)
            if found is not None:
                self._limiters.move_to_end(key)
                return found
        made = []
        if self.requests_per_minute is not None or self.tokens_per_minute is not None:
            made.append(
                WindowRateLimiter(
                    self.backend,
                    key=limit_key(f"{self.name}:key:{key}"),
                    requests_per_minute=self.requests_per_minute,
                    tokens_per_minute=self.tokens_per_minute,
                    window=self.window,
                    max_wait=self.max_wait,
                )
            )
        if self.token_budget is not None:
            made.append(
                WindowRateLimiter(
                    self.backend,
                    key=limit_key(f"{self.name}:budget:{key}"),
                    tokens_per_minute=self.token_budget,
                    window=self.budget_period,
                    max_wait=0,  # a spent budget is not waited for
                )
            )
        with self._lock:
            self._limiters[key] = made
            while len(self._limiters) > MAX_CACHED_KEYS:
                self._limiters.popitem(last=False)
        return made

    async def acquire(self, *, max_wait: timedelta | float | None = None) -> Permit:
        """A slot of the calling run's key (every limit of it), or at once for a run without a key."""
        key = current_key()
        permit = Permit(window=-1, requests=0, tokens=0)
        if key is None:
            return permit
        for limiter in self.limiters(key):
            permit = await limiter.acquire(max_wait=max_wait if limiter.max_wait else 0)
        return permit

    async def record(self, tokens: int) -> None:
        """Add a call's tokens to its key's window and budget."""
        key = current_key()
        if key is not None:
            for limiter in self.limiters(key):
                await limiter.record(tokens)

    def describe(self) -> str:
        parts = []
        if self.requests_per_minute is not None:
            parts.append(f"{self.requests_per_minute} requests")
        if self.tokens_per_minute is not None:
            parts.append(f"{self.tokens_per_minute} tokens")
        limits = f"{' and '.join(parts)} per {self.window:g}s window" if parts else ""
        budget = (
            f"a budget of {self.token_budget} tokens per {self.budget_period:g}s" if self.token_budget else ""
        )
        return "per concurrency key: " + "; ".join(part for part in (limits, budget) if part)

    def __repr__(self) -> str:
        return f"<KeyedRateLimiter {self.describe()}>"

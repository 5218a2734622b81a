"""Window counters in this process's memory (one process; the embedded defaults and tests)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from agentloop.orchestration.llm.limits.window import Denial, Permit

__all__ = ["MemoryBackend"]


@dataclass(slots=True)
class _Window:
    index: int
    requests: int = 0
    tokens: int = 0


class MemoryBackend:
    """Counters of fixed windows of ``clock`` (default ``time.monotonic``), one set per key.

    Safe to share between threads and event loops: a lock guards every update
    and nothing awaits while holding it. Only the current window of each key
    is kept.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}

    def _current(self, key: str, window: float) -> tuple[_Window, float]:
        """The current window of ``key`` (caller holds the lock) and the seconds it has left."""
        now = self._clock()
        index = math.floor(now / window)
        counts = self._windows.get(key)
        if counts is None or counts.index != index:
            counts = self._windows[key] = _Window(index)
        return counts, (index + 1) * window - now

    async def take_slot(
        self, key: str, *, window: float, max_requests: int | None, max_tokens: int | None
    ) -> Permit | Denial:
        with self._lock:
            counts, left = self._current(key, window)
            if max_tokens is not None and counts.tokens >= max_tokens:
                return Denial(window=counts.index, reason="tokens", retry_after=left)
            if max_requests is not None and counts.requests >= max_requests:
                return Denial(window=counts.index, reason="requests", retry_after=left)
            counts.requests += 1
            return Permit(window=counts.index, requests=counts.requests, tokens=counts.tokens)

    async def add_tokens(self, key: str, *, window: float, tokens: int) -> None:
        with self._lock:
            counts, _ = self._current(key, window)
            counts.tokens += tokens

    def usage(self, key: str, *, window: float) -> tuple[int, int, int]:
        with self._lock:
            counts, _ = self._current(key, window)
            return counts.index, counts.requests, counts.tokens

    def describe(self, key: str) -> str:
        return f"in-process {key}"

    def close(self) -> None:
        """Nothing to close."""

    def __repr__(self) -> str:
        return "<MemoryBackend>"

"""The concurrency key of the run whose code runs now: set around a task's node, read by the
per-key rate limits of model calls (``llm/limits/keyed.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["current_key", "running_key"]

_key: ContextVar[str | None] = ContextVar("agentloop_concurrency_key", default=None)


def current_key() -> str | None:
    """The concurrency key of the run in progress here, or ``None``."""
    return _key.get()


@contextmanager
def running_key(key: str | None) -> Iterator[None]:
    """Run the ``with`` block as a task of a run of ``key`` (an event loop started inside it, and
    every coroutine it runs, sees the key)."""
    token = _key.set(key)
    try:
        yield
    finally:
        _key.reset(token)

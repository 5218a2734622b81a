"""Hooks may be plain ``def`` or ``async def``: the engine awaits what is awaitable."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


#: What a plain ``def`` hook returns most often: never awaitable, known without the ABC check.
_PLAIN = frozenset({type(None), bool, int, float, str, dict, list, tuple})


async def maybe_await(value: T | Awaitable[T]) -> T:
    """Await ``value`` when it is awaitable: hooks may be ``def`` or ``async def``."""
    if type(value) in _PLAIN:
        return value  # type: ignore[return-value]
    if inspect.isawaitable(value):
        return await value
    return value

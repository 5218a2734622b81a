"""Hooks may be plain ``def`` or ``async def``: the engine awaits what is awaitable."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def maybe_await(value: T | Awaitable[T]) -> T:
    """Await ``value`` when it is awaitable: hooks may be ``def`` or ``async def``."""
    if inspect.isawaitable(value):
        return await value
    return value

"""Reading dependencies out of ``context`` without inspecting it.

``context`` is whatever the application passes: an object with attributes or a
mapping. The core only ever *reads* named slots through :func:`context_value`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def context_value(context: Any, name: str, default: Any = None) -> Any:
    """``context.name`` or ``context[name]``; ``default`` when absent or ``None``."""
    if context is None:
        return default
    value = context.get(name, default) if isinstance(context, Mapping) else getattr(context, name, default)
    return default if value is None else value


async def maybe_await(value: T | Awaitable[T]) -> T:
    """Await ``value`` when it is awaitable: hooks may be ``def`` or ``async def``."""
    if inspect.isawaitable(value):
        return await value
    return value

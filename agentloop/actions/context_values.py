"""Reading dependencies out of ``context`` without inspecting it.

``context`` is whatever the application passes: an object with attributes or a
mapping. The core only ever *reads* named slots through :func:`context_value`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def context_value(context: Any, name: str, default: Any = None) -> Any:
    """``context.name`` or ``context[name]``; ``default`` when absent or ``None``."""
    if context is None:
        return default
    value = context.get(name, default) if isinstance(context, Mapping) else getattr(context, name, default)
    return default if value is None else value

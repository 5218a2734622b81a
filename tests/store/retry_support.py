"""What the store's retry tests share."""

from __future__ import annotations

from collections.abc import Callable


def counting(error: Exception) -> tuple[Callable[[], None], list[int]]:
    """A call that always raises ``error``, and the list it appends to on every try."""
    calls: list[int] = []

    def fail() -> None:
        calls.append(1)
        raise error

    return fail, calls

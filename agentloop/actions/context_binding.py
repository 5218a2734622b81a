"""``Binding``: a ``ContextVar`` set for the length of a ``with`` block, at the cost of two calls.

Every ``use_*`` block of the core (``use_meter``, ``use_tracer``, ``use_step_cache``, the run
scope's sinks...) sets one context variable and puts it back on the way out. A generator-based
``contextlib.contextmanager`` does that in a few microseconds; the loop engine opens a dozen such
blocks per run and one per iteration, which a pack of hundreds of branches pays on one core
(``docs/how-to/packing.md``). A :class:`Binding` is the same block as a plain object.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["Binding"]


class Binding(Generic[T]):
    """``with Binding(var, value):`` runs the block with ``var`` set to ``value``, then puts back
    what it was (also when the block raises). Entering yields nothing; one object, one block."""

    __slots__ = ("_token", "_value", "_var")

    def __init__(self, var: ContextVar[T], value: T) -> None:
        self._var, self._value = var, value
        self._token: Token[T] | None = None

    def __enter__(self) -> None:
        self._token = self._var.set(self._value)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        token, self._token = self._token, None
        if token is not None:
            self._var.reset(token)

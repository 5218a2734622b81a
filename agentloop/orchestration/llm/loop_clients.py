"""``LoopClients``: one SDK client per running event loop, for a processor used on many loops.

An SDK's async client keeps an HTTP connection pool whose connections belong to the
event loop that opened them. A processor built once and used from several loops (a
script calling ``request_sync`` three times, ``asyncio.run`` twice, two threads) would
hand loop 2 a connection of loop 1, and fail with ``Event loop is closed``. So a
processor asks :meth:`LoopClients.current` for the client of the loop it runs on: the
first loop gets the client the processor was built with, every other loop one of its
own from the factory, and a client whose loop has closed is dropped (its loop cannot
close it any more; its sockets go with it). The map is weak-keyed by the loop and
guarded by a lock, since two threads may ask at once.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["LoopClients"]

ClientT = TypeVar("ClientT")


class LoopClients(Generic[ClientT]):
    """``first`` serves the first loop that asks; ``factory`` builds the client of each other loop
    (``None``: ``first`` serves every loop, for a client its owner passed in)."""

    def __init__(self, first: ClientT, factory: Callable[[], ClientT] | None) -> None:
        self.first = first
        self._factory = factory
        self._first_taken = False
        self._lock = threading.Lock()
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ClientT] = (
            weakref.WeakKeyDictionary()
        )

    def current(self) -> ClientT:
        """The client of the running event loop (built on its first call there)."""
        if self._factory is None:
            return self.first
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(loop)
            if client is None:
                for ended in [other for other in self._clients if other.is_closed()]:
                    del self._clients[ended]
                client = self._factory() if self._first_taken else self.first
                self._first_taken = True
                self._clients[loop] = client
            return client

    def __len__(self) -> int:
        """How many loops hold a client now."""
        with self._lock:
            return len(self._clients)

    async def aclose(self, close: Callable[[ClientT], Awaitable[None]]) -> None:
        """Close the running loop's client with ``close`` and forget every client (the clients of
        other loops are dropped: only their own loop could close them)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(loop) if self._factory is not None else self.first
            taken = self._first_taken or self._factory is None
            self._clients.clear()
        if client is not None:
            await close(client)
        elif not taken:
            await close(self.first)  # never used: closing it costs nothing

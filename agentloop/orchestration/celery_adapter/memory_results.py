"""The in-memory result backend of the embedded defaults (``cache+memory://``), bounded by time.

Celery's own ``cache+memory://`` keeps the results of every app in the process in one
least-recently-used map of 5,000 entries (``celery.backends.cache._DUMMY_CLIENT_CACHE``) and ignores
their expiry. A long-lived process on the embedded defaults (``agentloop serve``, a notebook, the
test suite) that runs more tasks than that loses results it still needs: a composite branch's
result evicted before its chord is unlocked leaves the run ``running`` for good.

:class:`MemoryResultBackend` keeps Celery's cache backend and its URL, and swaps the client for
:class:`ExpiringMemory`: no count bound, every entry kept until its expiry (``result_expires``, a
day by default; ``result_chord_expires`` for a chord's counter), expired entries dropped as new
ones arrive. What it holds is what the other result backends hold: the results of the last
``result_expires``. :func:`use_memory_results` installs it on an app, whatever its result backend
turns out to be; only ``cache+memory://`` is affected.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from celery import Celery
from celery.backends.cache import CacheBackend

__all__ = ["ExpiringMemory", "MemoryResultBackend", "use_memory_results"]


class ExpiringMemory:
    """A thread-safe map of keys to values, each kept until its expiry and no longer.

    It speaks the part of a memcached client Celery's cache backend uses (``get``,
    ``get_multi``, ``set``, ``delete``, ``incr``, ``touch``). An expiry of 0 or less keeps the entry
    until it is deleted, as memcached does. ``clock`` is the time source (``time.monotonic``).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        # key -> (value, deadline or None); kept in the order of their last write, so the oldest
        # writes (which, with one expiry per backend, expire first) are looked at first.
        self._entries: OrderedDict[Any, tuple[Any, float | None]] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            self._drop_expired(self._clock())
            return len(self._entries)

    def get(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return self._live(key, self._clock())

    def get_multi(self, keys: Iterable[Any]) -> dict[Any, Any]:
        with self._lock:
            now = self._clock()
            found = {key: self._live(key, now) for key in keys}
        return {key: value for key, value in found.items() if value is not None}

    def set(self, key: Any, value: Any, expire: float = 0, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            now = self._clock()
            self._entries[key] = (value, now + expire if expire and expire > 0 else None)
            self._entries.move_to_end(key)
            self._drop_expired(now)

    def delete(self, key: Any, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def incr(self, key: Any, delta: int = 1) -> int:
        """The counter at ``key`` raised by ``delta`` (a chord's count of finished members)."""
        with self._lock:
            now = self._clock()
            current = self._live(key, now)
            if current is None:
                raise KeyError(key)  # as Celery's map does: a chord counter is always set first
            value = int(current) + delta
            self._entries[key] = (str(value), self._entries[key][1])
            return value

    def touch(self, key: Any, expire: float) -> None:
        with self._lock:
            now = self._clock()
            if self._live(key, now) is not None:
                value, _ = self._entries[key]
                self._entries[key] = (value, now + expire if expire and expire > 0 else None)

    def _live(self, key: Any, now: float) -> Any:
        entry = self._entries.get(key)
        if entry is None:
            return None
        value, deadline = entry
        if deadline is not None and deadline <= now:
            del self._entries[key]
            return None
        return value

    def _drop_expired(self, now: float) -> None:
        """Drop the expired entries at the old end (stops at the first live one: cheap per write)."""
        while self._entries:
            key, (_, deadline) = next(iter(self._entries.items()))
            if deadline is None or deadline > now:
                return
            del self._entries[key]


#: The one map of the process: Celery builds a backend per thread, and every thread of a process
#: (the embedded worker's, the caller's) must read the same results. Keys are task ids.
_MEMORY = ExpiringMemory()


class MemoryResultBackend(CacheBackend):  # type: ignore[misc]
    """Celery's cache backend; on ``memory://`` its client is :data:`_MEMORY`, not Celery's LRU map."""

    @property
    def client(self) -> Any:
        if self.backend == "memory":
            return _MEMORY
        return super().client


def use_memory_results(app: Celery) -> None:
    """Make ``cache`` in ``app``'s result backend URL name :class:`MemoryResultBackend` (the loader's
    backend aliases are read when the app first builds its backend, after any later setting)."""
    aliases = dict(app.loader.override_backends)
    aliases["cache"] = f"{MemoryResultBackend.__module__}:{MemoryResultBackend.__qualname__}"
    app.loader.override_backends = aliases

"""The lag watch: a branch that blocks its pack's event loop is found and named.

The branches of a pack share one event loop: while one runs code that does not await (a
synchronous HTTP call, ``time.sleep``, heavy parsing), the others wait. Each pack runs a
*heartbeat* on its loop (:meth:`LagWatch.heartbeat`), a coroutine that wakes every
:data:`TICK` seconds; one watchdog thread per process looks at every pack's last beat. When a
beat is :data:`LAG_THRESHOLD` late, the loop is held by whatever runs on it: the watchdog reads
that thread's stack (``sys._current_frames``) for the innermost run scope (the branch's path)
and the function it is in, and takes it when two looks in a row agree (one long call, not a
crowd of short ones). When the heartbeat runs again it hands the finding, with how long the
loop was held, to the pack's ``on_lag`` (the engine logs it, adds an event to the branch and
counts it in the metrics). The watch costs a wake-up every :data:`TICK` seconds per pack, and
a look at the stacks only when a beat is late.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

from agentloop.loops.scope import RunScope

__all__ = ["LAG_THRESHOLD", "TICK", "Blocked", "LagWatch"]

#: How late a heartbeat may be before its loop counts as blocked (seconds). A model-bound
#: branch holds the loop for well under a millisecond at a time.
LAG_THRESHOLD = 0.2
#: How often a heartbeat wakes, and the watchdog looks (seconds).
TICK = 0.05


@dataclass(frozen=True, slots=True)
class Blocked:
    """What held a pack's event loop: the branch (its run scope's ``path``) and where its code was."""

    path: str
    where: str


def _blocked_in(thread_id: int) -> Blocked | None:
    """The innermost run scope on ``thread_id``'s stack and the function running there."""
    frame: FrameType | None = sys._current_frames().get(thread_id)
    innermost = frame
    while frame is not None:
        scope = frame.f_locals.get("scope")
        if isinstance(scope, RunScope):
            code = innermost.f_code if innermost is not None else frame.f_code
            line = innermost.f_lineno if innermost is not None else frame.f_lineno
            return Blocked(path=scope.path, where=f"{code.co_qualname} ({code.co_filename}:{line})")
        frame = frame.f_back
    return None


class LagWatch:
    """The watch of one pack's event loop (the module doc); ``on_lag(blocked, seconds)`` is
    called on that loop, after the block."""

    def __init__(self, on_lag: Callable[[Blocked, float], None], *, threshold: float = LAG_THRESHOLD) -> None:
        self.on_lag, self.threshold = on_lag, threshold
        self.thread_id = 0
        self.beat = time.monotonic()
        self.candidate: Blocked | None = None  # the watchdog's first look
        self.found: Blocked | None = None  # confirmed by its second

    async def heartbeat(self) -> None:
        """Beat until cancelled; report what blocked the loop between two beats."""
        self.thread_id, self.beat = threading.get_ident(), time.monotonic()
        _WATCHDOG.add(self)
        try:
            while True:
                await asyncio.sleep(TICK)
                now = time.monotonic()
                lag, self.beat = now - self.beat - TICK, now
                found, self.found, self.candidate = self.found, None, None
                if found is not None and lag >= self.threshold:
                    self.on_lag(found, lag)
        finally:
            _WATCHDOG.remove(self)

    def look(self, now: float) -> None:
        """The watchdog's look (its thread): a late beat's holder, kept once two looks agree."""
        if self.found is not None or now - self.beat < self.threshold:
            return
        seen = _blocked_in(self.thread_id)
        if seen is not None and seen == self.candidate:
            self.found = seen
        self.candidate = seen


class _Watchdog:
    """The process's one watchdog thread, alive while some pack is watched."""

    def __init__(self) -> None:
        self.watches: set[LagWatch] = set()
        self.lock = threading.Condition()
        self.thread: threading.Thread | None = None

    def add(self, watch: LagWatch) -> None:
        with self.lock:
            self.watches.add(watch)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="agentloop-lag-watch", daemon=True)
                self.thread.start()
            self.lock.notify()

    def remove(self, watch: LagWatch) -> None:
        with self.lock:
            self.watches.discard(watch)

    def _run(self) -> None:
        while True:
            with self.lock:
                while not self.watches:
                    self.lock.wait()
                watches = list(self.watches)
            now = time.monotonic()
            for watch in watches:
                watch.look(now)
            time.sleep(TICK)


_WATCHDOG = _Watchdog()

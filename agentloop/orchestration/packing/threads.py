"""``PackThreads``: where a pack runs its branches' plain-function work, off its event loop.

A pack (``agentloop.pack``, ``docs/how-to/packing.md``) runs its branches on one event loop. The
engine awaits a coroutine, but it would call a plain function (a loop's ``def advance_state``, a
``@step`` on a ``def``) on the loop's thread, where one that blocks (a synchronous HTTP call,
``time.sleep``) stalls every other branch of the pack. In a pack the run scope's ``offload``
(``loops/scope.py``, :func:`~agentloop.loops.scope.call_work`) is a :class:`PackThreads`: the
function runs in one of the pack's threads, with the branch's context variables (its run scope,
meter, recording...), while the loop runs the other branches; the branch awaits its result.

A pack opens :func:`pack_threads` around its branches (``WorkflowEngine.start_pack``, a batch's
``agentloop.batch_pack``); the engine gives each branch's scope :func:`current_pack_threads`.
The threads are made on first use (a pack whose work is all coroutines makes none), at most one
per branch of the pack (as many as a task per branch would hold on a ``--pool threads`` worker),
and let go when the pack ends. A call costs a hand-over to a thread and back (``bench/README.md``,
"Issue 36": some tens of microseconds, against milliseconds for a Celery task of its own).

What a plain function keeps: it runs whole (a thread is never interrupted): when its branch is
cancelled or passes its deadline, the branch ends at once and the function's result, when it
comes, is dropped, as a task cut short by its deadline drops its step's. Like branches in a
threads worker's tasks, the plain functions of one pack may run at the same time, on threads.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["PackThreads", "current_pack_threads", "pack_threads"]

T = TypeVar("T")


class PackThreads:
    """The :class:`~agentloop.loops.scope.Offload` of one pack of ``size`` branches (the module
    doc). Used from the pack's event loop; :meth:`close` when the pack ends."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self._executor: ThreadPoolExecutor | None = None
        #: How many calls went to a thread (for tests and the bench).
        self.calls = 0

    def __call__(self, work: Callable[[], T]) -> asyncio.Future[T]:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="agentloop-pack")
        self.calls += 1
        context = contextvars.copy_context()  # the branch's scope, meter, recording... in the thread
        return asyncio.get_running_loop().run_in_executor(self._executor, context.run, work)

    def close(self) -> None:
        """Let the threads go: calls still queued are dropped (their branches have ended), a call
        running ends on its own (a thread is never interrupted), its result dropped."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


_current: contextvars.ContextVar[PackThreads | None] = contextvars.ContextVar(
    "agentloop_pack_threads", default=None
)


@contextmanager
def pack_threads(size: int) -> Iterator[PackThreads]:
    """The threads of a pack of ``size`` branches, for the branches started inside the block (each
    asyncio task made there keeps them); let go when the block ends."""
    threads = PackThreads(size)
    token = _current.set(threads)
    try:
        yield threads
    finally:
        _current.reset(token)
        threads.close()


def current_pack_threads() -> PackThreads | None:
    """The threads of the pack this code runs in, or ``None`` outside a pack."""
    return _current.get()

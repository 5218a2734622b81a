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
The threads are the process's, shared by its packs: made on first use (a process whose packs'
work is all coroutines makes none), one for each call running at once (up to
:data:`MAX_THREADS`), and kept for the next pack (making a thread costs more than a call). A call
costs a hand-over to a thread and back: about 0.1 ms of CPU on a shared 2-core host
(``bench/README.md``, "Issue 36"), against milliseconds for a Celery task of its own.

What a plain function keeps: it runs whole (a thread is never interrupted): when its branch is
cancelled or passes its deadline, the branch ends at once and the function's result, when it
comes, is dropped, as a task cut short by its deadline drops its step's. Like branches in a
threads worker's tasks, the plain functions of one pack may run at the same time, on threads.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["PackThreads", "current_pack_threads", "pack_threads"]

T = TypeVar("T")


#: The most threads the packs of one process run plain-function work in at once: far above the
#: branches a worker's packs hold at once in practice (its task slots times 200).
MAX_THREADS = 1024

_shared: dict[str, ThreadPoolExecutor] = {}  # "threads": this process's, once made
_shared_lock = threading.Lock()


def _threads() -> ThreadPoolExecutor:
    """The process's threads for packs' plain-function work, made on first use and kept: a
    thread made for one pack serves the next (making one costs more than a call)."""
    with _shared_lock:
        executor = _shared.get("threads")
        if executor is None:
            executor = _shared["threads"] = ThreadPoolExecutor(
                max_workers=MAX_THREADS, thread_name_prefix="agentloop-pack"
            )
        return executor


def _forget_threads() -> None:  # a forked child has none of its parent's threads
    _shared.clear()


os.register_at_fork(after_in_child=_forget_threads)


class PackThreads:
    """The :class:`~agentloop.loops.scope.Offload` of one pack (the module doc): its calls go to
    the process's threads. Used from the pack's event loop."""

    def __init__(self) -> None:
        #: How many calls went to a thread (for tests and the bench).
        self.calls = 0

    def __call__(self, work: Callable[[], T]) -> asyncio.Future[T]:
        self.calls += 1
        context = contextvars.copy_context()  # the branch's scope, meter, recording... in the thread
        return asyncio.get_running_loop().run_in_executor(_threads(), context.run, work)


_current: contextvars.ContextVar[PackThreads | None] = contextvars.ContextVar(
    "agentloop_pack_threads", default=None
)


@contextmanager
def pack_threads() -> Iterator[PackThreads]:
    """A pack's :class:`PackThreads`, for the branches started inside the block (each asyncio task
    made there keeps them)."""
    threads = PackThreads()
    token = _current.set(threads)
    try:
        yield threads
    finally:
        _current.reset(token)


def current_pack_threads() -> PackThreads | None:
    """The threads of the pack this code runs in, or ``None`` outside a pack."""
    return _current.get()

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
The threads are the process's, shared by its packs (:class:`SpawningThreads`): made when work
comes and no thread is idle, one for each call running at once (up to :data:`MAX_THREADS`), by a
thread of their own, never by the loop that hands the work over, and kept for the next pack
(making a thread costs more than a call). A call
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
import functools
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["PackThreads", "current_pack_threads", "pack_threads"]

T = TypeVar("T")

logger = logging.getLogger(__name__)


#: The most threads the packs of one process run plain-function work in at once: far above the
#: branches a worker's packs hold at once in practice (its task slots times 200).
MAX_THREADS = 1024


class _WorkItem:
    __slots__ = ("fn", "future")

    def __init__(self, future: Future[Any], fn: Callable[[], Any]) -> None:
        self.future, self.fn = future, fn

    def run(self, done: Callable[[], None]) -> None:
        """Run the work and settle its future, calling ``done`` first: the caller woken by the
        result finds the thread counted idle again (its next call takes it, not a new thread)."""
        settle: Callable[[], Any] | None = None  # cancelled before it ran: nothing to settle
        if self.future.set_running_or_notify_cancel():
            try:
                settle = functools.partial(self.future.set_result, self.fn())
            except BaseException as error:  # the caller's to see, as ThreadPoolExecutor hands it over
                settle = functools.partial(self.future.set_exception, error)
        done()
        if settle is not None:
            settle()


class SpawningThreads(Executor):
    """Threads made on demand (up to ``max_threads``) and kept, whose :meth:`submit` never starts
    one: a *spawner* thread does.

    ``ThreadPoolExecutor.submit`` starts a thread itself when none is idle, inside a lock every
    submitter shares, and ``Thread.start`` waits until the new thread has run. Called from a
    pack's event loop, in a process whose other packs hold its GIL, that wait stalled the loop,
    and every other pack's loop that submitted meanwhile (0.23 and 0.57 s, read by the lag watch
    in ``bench.packing --runs 10000``, reported as a branch blocking its pack). Here a submit
    queues its work, asks the spawner for a thread when none is idle or coming, and returns.

    The threads are daemons, blocked on the queue when idle: a pack drains its writes before its
    task ends, so a worker that exits has none in flight. Where the system refuses a thread and
    none runs, the queued work fails with its error (``ThreadPoolExecutor`` raised it from
    ``submit``)."""

    def __init__(self, max_threads: int, name: str) -> None:
        self._max, self._name = max_threads, name
        self._work: queue.SimpleQueue[_WorkItem | None] = queue.SimpleQueue()
        self._requests: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._queued = self._idle = self._coming = self._threads = 0
        self._closed = False
        self._spawner = threading.Thread(target=self._spawn, name=f"{name}-spawner", daemon=True)
        self._spawner.start()

    @property
    def threads(self) -> int:
        """How many threads run work (made so far; they are kept)."""
        return self._threads

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new work after shutdown")
            self._work.put(_WorkItem(future, functools.partial(fn, *args, **kwargs)))
            self._queued += 1
            wanted = self._queued > self._idle + self._coming and self._threads + self._coming < self._max
            if wanted:
                self._coming += 1
        if wanted:
            self._requests.put(True)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            threads = self._threads + self._coming
        self._requests.put(False)
        for _ in range(threads):
            self._work.put(None)
        if wait:
            self._spawner.join()

    def _spawn(self) -> None:
        while self._requests.get():
            thread = threading.Thread(target=self._serve, name=f"{self._name}_{self._threads}", daemon=True)
            try:
                thread.start()  # the thread counts itself (``_serve``)
            except RuntimeError as error:  # the system refused a thread ("can't start new thread")
                with self._lock:
                    self._coming -= 1
                    stranded = self._threads == 0 and self._coming == 0
                logger.error("%s: no thread could be started for queued work: %s", self._name, error)
                if stranded:  # nothing will ever run the queue: its callers get the error
                    self._fail_queued(error)

    def _fail_queued(self, error: BaseException) -> None:
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                with self._lock:
                    self._queued -= 1
                if item.future.set_running_or_notify_cancel():
                    item.future.set_exception(error)

    def _idle_again(self) -> None:
        with self._lock:
            self._idle += 1

    def _serve(self) -> None:
        with self._lock:  # from coming to idle in one step: a submit meanwhile counts it once
            self._coming -= 1
            self._threads += 1
            self._idle += 1
        while True:
            item = self._work.get()
            with self._lock:
                self._idle -= 1
                if item is not None:
                    self._queued -= 1
            if item is None:
                return
            item.run(self._idle_again)
            del item  # its result and arguments are not kept alive by an idle thread


_shared: dict[str, SpawningThreads] = {}  # "threads": this process's, once made
_shared_lock = threading.Lock()


def _threads() -> SpawningThreads:
    """The process's threads for packs' plain-function work, made on first use and kept: a
    thread made for one pack serves the next (making one costs more than a call)."""
    with _shared_lock:
        executor = _shared.get("threads")
        if executor is None:
            executor = _shared["threads"] = SpawningThreads(MAX_THREADS, "agentloop-pack")
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

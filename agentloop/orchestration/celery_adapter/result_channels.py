"""A canvas sent from inside a task leaves its process subscribed to no result channel.

When a task replaces itself with a chord (``canvas.py``), Celery's group
registers each header task's result with the result backend of the process that
sends it, as a result to wait for, and holds it strongly (the group's barrier).
On Redis that also subscribes the process's ``ResultConsumer`` to the result's
pub/sub channel. A worker never waits on those results (the chord's body runs
when they are done), so nothing reads the channel, unsubscribes from it, or lets
the result objects go: channels, the messages Redis publishes on them and the
pool process's memory grow with every composite run (upstream celery/celery#4824
and #5320; #6963 for a consumer that is never drained).

:func:`unwatched_results` wraps the sending of a canvas in a worker process. Afterwards
it lets go of every result that the sending registered (which unsubscribes its
channel), then reads the replies to those cancellations: redis-py forgets an
unsubscribed channel only once Redis has confirmed it, and would subscribe to
it again after a reconnection. Backends without a pub/sub consumer are left
alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery
from celery._state import task_join_will_block

#: How long one cancellation waits, at most, for Redis to confirm it; what is left is read by
#: the next one, or by a wait for a result of this process.
CONFIRM_SECONDS = 0.2


@contextmanager
def unwatched_results(app: Celery) -> Iterator[None]:
    """Run the block (which sends a canvas), then drop the results it registered to wait on.

    Only in a process that may not wait on results (Celery's ``task_join_will_block``: a
    ``celery worker``'s pool); an embedded worker shares its process with clients that do.
    """
    backend = app.backend
    consumer = getattr(backend, "result_consumer", None)
    subscribed = getattr(consumer, "subscribed_to", None)
    if not isinstance(subscribed, set) or not task_join_will_block():
        yield
        return
    before = set(subscribed)
    try:
        yield
    finally:
        added = set(subscribed) - before
        if added:
            _forget(backend, consumer, added)


def _forget(backend: Any, consumer: Any, keys: set[Any]) -> None:
    """Stop waiting on the results of ``keys`` (the result objects are let go, the channels
    unsubscribed), and read the confirmations.

    One thread at a time per consumer: the threads of a threads worker share its pub/sub
    connection, which redis-py does not let two threads read at once."""
    lock = consumer.__dict__.setdefault("_agentloop_forget_lock", threading.Lock())  # atomic in CPython
    with lock:
        _forget_locked(backend, consumer, keys)


def _forget_locked(backend: Any, consumer: Any, keys: set[Any]) -> None:
    prefix = _as_text(backend.get_key_for_task("-"))[:-1]
    for key in keys:
        task_id = _as_text(key).removeprefix(prefix)
        waiters = [w for mapping in backend._pending_results for w in mapping.get(task_id, {}).values()]
        for result in waiters:
            backend.remove_pending_result(result)  # the last one unsubscribes
        if not waiters:
            consumer.cancel_for(task_id)
    _read_confirmations(consumer)


def _read_confirmations(consumer: Any) -> None:
    """Read the pub/sub replies (and any result message) until every cancellation is confirmed,
    or :data:`CONFIRM_SECONDS` have passed."""
    pubsub = getattr(consumer, "_pubsub", None)
    pending = getattr(pubsub, "pending_unsubscribe_channels", None)
    deadline = time.monotonic() + CONFIRM_SECONDS
    while pending and time.monotonic() < deadline:
        consumer.drain_events(timeout=0.05)


def _as_text(key: Any) -> str:
    return key.decode() if isinstance(key, bytes) else str(key)

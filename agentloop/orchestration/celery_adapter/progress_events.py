"""``task-progress`` events through one event dispatcher per worker process.

A task's progress reaches Flower and other event consumers as a ``task-progress``
event beside its ``PROGRESS`` state (``tasks.py``). Celery's ``Task.send_event``
acquires a producer and builds a new ``EventDispatcher`` for every event (its
exchange, producer and clock set up each time: about 0.6 ms of a worker's CPU per
event, measured by ``bench/model_bound`` with ``AGENTLOOP_BENCH_TASK_CPU``).
:class:`ProgressEvents` builds one dispatcher on its own connection the first time a
process sends, and keeps it: the dispatcher's own lock serialises the threads of a
threads worker, a forked child builds its own, and a dispatcher whose send failed
is closed and built again at the next event. The events are the ones
``Task.send_event`` sends: the same type, the task's ``uuid``, the worker's
hostname, and retried by the app's ``task_publish_retry_policy``.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from celery import Celery, Task
from celery.app.task import Context

__all__ = ["PROGRESS_EVENT", "ProgressEvents", "progress_events_of"]

#: The event type a task's progress is sent as (Flower shows it on the task).
PROGRESS_EVENT = "task-progress"


class ProgressEvents:
    """Sends the ``task-progress`` events of an app's tasks in this process (module doc)."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._dispatcher: Any = None
        self._pid = 0
        #: How many dispatchers this object built (one per process unless a send failed).
        self.built = 0

    def send(self, task: Task | Context, progress: dict[str, Any]) -> None:
        """Send ``progress`` as the ``task-progress`` event of the running ``task`` (or of the
        task whose request is given: from another thread, as a pack publishes)."""
        request = task if isinstance(task, Context) else task.request
        dispatcher = self._dispatcher_for(str(request.hostname or ""))
        try:
            dispatcher.send(
                PROGRESS_EVENT,
                uuid=request.id,
                retry=True,
                retry_policy=self.app.conf.task_publish_retry_policy,
                progress=progress,
            )
        except Exception:
            self._drop(dispatcher)
            raise

    def close(self) -> None:
        """Close this process's dispatcher and its connection (a new one is built on the next send)."""
        with self._lock:
            dispatcher, self._dispatcher = self._dispatcher, None
        if dispatcher is not None and self._pid == os.getpid():
            _close(dispatcher)

    def _dispatcher_for(self, hostname: str) -> Any:
        with self._lock:
            if self._dispatcher is None or self._pid != os.getpid():  # none yet, or a forked child's
                connection = self.app.connection_for_write()
                self._dispatcher = self.app.events.Dispatcher(
                    connection, hostname=hostname or None, enabled=True, buffer_while_offline=False
                )
                self._pid = os.getpid()
                self.built += 1
            return self._dispatcher

    def _drop(self, dispatcher: Any) -> None:
        with self._lock:
            if self._dispatcher is dispatcher:
                self._dispatcher = None
        _close(dispatcher)


def _close(dispatcher: Any) -> None:
    connection = dispatcher.connection
    try:
        dispatcher.close()
    finally:
        if connection is not None:
            connection.release()


def progress_events_of(app: Celery) -> ProgressEvents:
    """The :class:`ProgressEvents` of an app, built on first use and kept on the app."""
    events = getattr(app, "agentloop_progress_events", None)
    if not isinstance(events, ProgressEvents):
        events = ProgressEvents(app)
        app.agentloop_progress_events = events
    return events

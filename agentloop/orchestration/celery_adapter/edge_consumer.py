"""What a worker does with a message its edge refuses: acknowledge it, fail its result, record the run.

:class:`EdgeConsumer` is the worker's consumer (Celery's ``worker_consumer``
setting, which :func:`install_edge` sets on every app ``create_app`` builds).
Before Celery's own task handler sees a message, it asks
:func:`~agentloop.orchestration.celery_adapter.edge.check_message`. A refused message is
never requeued into the next worker, and its sender learns at once:

* one ``ERROR`` line names the task, its id and the reason, never the body (a
  private task's arguments stay out of the log); Celery's ``task_rejected``
  signal and a ``task-failed`` event (for Flower) are sent;
* the message is acknowledged (it leaves the queue) only once its refusal is
  recorded; a message with nothing to record it under (no usable task id: no
  headers, a plain-text body), or whose refusal could not be recorded after
  :data:`RECORD_ATTEMPTS` tries of the run store's own retries
  (``AGENTLOOP_STORE_RETRY_SECONDS`` each), is dead-lettered to ``<queue>.dead``
  (RabbitMQ: rejected without requeue, the queues' ``x-dead-letter-routing-key``;
  Redis: a copy pushed to that list, then acknowledged), never dropped;
* its task id's result becomes ``FAILURE`` with :class:`celery.exceptions.InvalidTaskError`
  and the reason, so ``AsyncResult(id).get()`` raises at once, unless that id
  already has a state beyond "sent" (a duplicate id never rewrites a live or
  finished task);
* an ``agentloop.launch`` is recorded as a ``failed`` run with the reason, under
  its ``run_id`` (its task id by default), unless a run with that id exists.

A message written for a newer wire version than the worker's is not refused:
it goes back to its queue for a newer worker (``wire_versions.py``).

A refused message of another task records nothing on a run: its headers could
name any run, and only a run's own tasks may end it (``store/protocol.py``).

Celery's own refusals go the same way: a message it finds invalid
(``InvalidTaskError``, a content type it does not accept) or cannot decode.
Anything else the task handler raises for one message (a defect that would
stop the worker) is caught as a last resort and the message refused the same
way; connection errors still reach Celery, which reconnects.

The records are written on a thread of the recorder's own, so a slow or absent
run store never blocks the worker's event loop; the message is settled back on
the event loop (``hub.call_soon``) once they are. In a worker started with
``celery -A agentloop worker`` the recorder opens its own connection to
the run store (``DATABASE_URL``): the main process must not open the store its
forked pool children use. An app given a store (``create_app(store=...)``)
records there.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from celery import Celery, bootsteps, signals, states
from celery.exceptions import InvalidTaskError
from celery.utils.log import get_logger
from celery.worker.consumer import Consumer

from agentloop.orchestration.celery_adapter.config import dead_letter_queue_name
from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.celery_adapter.edge import (
    Rejection,
    check_message,
    describe,
    past_delivery_limit,
    rejection_of,
)
from agentloop.orchestration.celery_adapter.pack_gate import prefetch_limit
from agentloop.orchestration.celery_adapter.run_failures import RUN_TASKS, end_run_of_message
from agentloop.orchestration.celery_adapter.wire_versions import WireGate, too_new
from agentloop.orchestration.errors import DeliveryLimitError, RunExistsError
from agentloop.orchestration.store import RunStore, StoreRetry, open_store
from agentloop.orchestration.wire import LAUNCH_SENT_STATE

__all__ = [
    "RECORD_ATTEMPTS",
    "DeadLetterQueue",
    "EdgeConsumer",
    "RejectionRecorder",
    "Settle",
    "install_edge",
    "recorder_of",
]

logger = get_logger(__name__)

#: The states a task id may be in for a refusal to fail it: unknown, or sent by a client.
_FAILABLE = frozenset({states.PENDING, LAUNCH_SENT_STATE})
#: ... and for a message past its delivery limit: also started or retried by a worker that died.
_FAILABLE_EXHAUSTED = _FAILABLE | {states.STARTED, states.RETRY}
#: Errors of a connection that are really errors of one message's content.
_CONTENT_ERRORS = (LookupError, ValueError, TypeError)
#: How often the recorder tries to record a refusal (each try with the run store's own retries)
#: before its message is dead-lettered.
RECORD_ATTEMPTS = 5
#: What settles a refused message once its refusal is recorded (``True``) or cannot be (``False``).
Settle = Callable[[bool], None]


class RejectionRecorder:
    """Records refused messages in the result backend and the run store, on a thread of its own.

    At most ``capacity`` refusals wait to be written; beyond that one is logged
    and its message dead-lettered. A refusal is tried ``attempts`` times, ``pause`` s
    apart, before its message is dead-lettered.
    """

    def __init__(
        self,
        app: Celery,
        *,
        store: RunStore | None = None,
        capacity: int = 1000,
        attempts: int = RECORD_ATTEMPTS,
        pause: float = 1.0,
    ) -> None:
        self._app, self._store, self._capacity = app, store, capacity
        self._attempts, self._pause = attempts, pause
        self._queue: queue.Queue[tuple[Rejection, Settle | None] | None] = queue.Queue(capacity)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, rejection: Rejection, settle: Settle | None = None) -> None:
        """Record ``rejection`` soon, then call ``settle`` (on the recorder's thread) with whether it
        was recorded; nothing to record without a usable task id: ``settle(False)`` at once."""
        if rejection.task_id is None:
            if settle is not None:
                settle(False)
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="agentloop-edge", daemon=True)
                self._thread.start()
        try:
            self._queue.put_nowait((rejection, settle))
        except queue.Full:
            logger.warning(
                "Rejection of %s[%s] not recorded: %d are waiting",
                rejection.task,
                rejection.task_id,
                self._capacity,
            )
            if settle is not None:
                settle(False)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is waiting (for up to ``timeout`` s) and stop the thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None and thread.is_alive():
            try:
                self._queue.put(None, timeout=timeout)
            except queue.Full:
                return
            thread.join(timeout)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            rejection, settle = item
            recorded = self._record_patiently(rejection)
            if settle is not None:
                try:
                    settle(recorded)
                except Exception:
                    logger.exception(
                        "Could not settle the message of %s[%s]", rejection.task, rejection.task_id
                    )

    def _record_patiently(self, rejection: Rejection) -> bool:
        """Whether ``rejection`` was recorded, within ``attempts`` tries."""
        for attempt in range(1, self._attempts + 1):
            try:
                self.record(rejection)
                return True
            except Exception:
                logger.warning(
                    "Could not record the rejection of %s[%s] (try %d of %d)",
                    rejection.task,
                    rejection.task_id,
                    attempt,
                    self._attempts,
                    exc_info=True,
                )
            if attempt < self._attempts:
                time.sleep(self._pause)
        return False

    def record(self, rejection: Rejection) -> None:
        """Write ``rejection`` now: the run first, then the task's result (whose waiters read the run);
        raises when the run store is out of reach (the result is failed all the same, so its
        sender learns at once)."""
        assert rejection.task_id is not None
        if rejection.exhausted:
            self._end_exhausted(rejection)
            return
        error = InvalidTaskError(describe(rejection))
        if rejection.run_id is not None:
            try:
                if not self._fail_new_run(rejection.run_id, rejection, error):
                    return  # a run with that id exists: neither it nor its result is touched
            except RunExistsError:
                return
            except Exception:  # the store is out of reach: the sender still learns at once
                self._fail_result(rejection.task_id, error)
                raise
        self._fail_result(rejection.task_id, error)

    def _end_exhausted(self, rejection: Rejection) -> None:
        """A message past its delivery limit: its run ends ``failed`` by its task's own failure path
        (a launch's run is claimed, created if it never was; a step's run only with the owner token
        its message carries), then its result fails."""
        assert rejection.task_id is not None
        error = DeliveryLimitError(f"{rejection.task}[{rejection.task_id}]: {rejection.reason}")
        task = self._app.tasks.get(rejection.task) if rejection.task in RUN_TASKS else None
        if task is not None:
            end_run_of_message(
                task, self._run_store(), error, rejection.task_id, rejection.args, rejection.kwargs
            )
        backend = self._app.backend
        if backend.get_state(rejection.task_id) in _FAILABLE_EXHAUSTED:
            backend.mark_as_failure(rejection.task_id, error)

    def _run_store(self) -> RunStore:
        if self._store is None:
            settings = dependencies_of(self._app).settings  # the store's retries as the tasks have them
            retry = StoreRetry(settings.store.retry_seconds)
            self._store, _ = open_store(settings.database_url, retry=retry)
        return self._store

    def _fail_new_run(self, run_id: str, rejection: Rejection, error: InvalidTaskError) -> bool:
        store = self._run_store()
        if store.get_run(run_id) is not None:
            return False
        store.create_run(
            run_id=run_id,
            runnable=rejection.runnable or "(unreadable)",
            input=None,
            celery_task_id=rejection.task_id,
        )
        store.finish_run(run_id, status="failed", error={"type": type(error).__name__, "message": str(error)})
        return True

    def _fail_result(self, task_id: str, error: InvalidTaskError) -> None:
        backend = self._app.backend
        if backend.get_state(task_id) in _FAILABLE:  # never a live or finished task's result
            backend.mark_as_failure(task_id, error)


def recorder_of(app: Celery) -> RejectionRecorder:
    """The :class:`RejectionRecorder` of ``app`` (one is made if :func:`install_edge` did not)."""
    recorder = getattr(app, "agentloop_rejections", None)
    if not isinstance(recorder, RejectionRecorder):
        recorder = app.agentloop_rejections = RejectionRecorder(app)
    return recorder


class EdgeConsumer(Consumer):  # type: ignore[misc]
    """Celery's consumer with :func:`~agentloop.orchestration.celery_adapter.edge.check_message` in
    front, and the wire version check after it (it also reads the holding queues of its version)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wire_gate = WireGate(self.app)
        self.wire_gate.consume_holding_queues()

    @property
    def max_prefetch_count(self) -> int:
        """The prefetch Celery restores after a reconnect: its own, less a prefork worker's spare
        process (``pack_gate.py``)."""
        return prefetch_limit(self, self.pool.num_processes, self.prefetch_multiplier)

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Callable[[Any], None]:
        """Celery's task handler, called only for messages the edge lets through."""
        handle: Callable[[Any], None] = super().create_task_handler(*args, **kwargs)

        limit = dependencies_of(self.app).settings.delivery_limit

        def on_task_received(message: Any) -> None:
            rejection = check_message(message, self.wire_gate.version)
            if rejection is None and (version := too_new(message.headers, self.wire_gate.version)):
                self.defer(message, version)  # a newer worker's: not counted against the limit
                return
            rejection = rejection or past_delivery_limit(message, limit)
            if rejection is None:
                try:
                    handle(message)
                    return
                except Exception as error:
                    if isinstance(error, self.connection_errors + self.channel_errors) and not isinstance(
                        error, _CONTENT_ERRORS
                    ):
                        raise  # the broker connection is gone: Celery reconnects
                    logger.exception("The task handler failed on one message; the message is refused")
                    reason = f"the worker could not take it ({type(error).__name__})"
                    rejection = rejection_of(message, reason)
            self.refuse(message, rejection)

        return on_task_received

    def defer(self, message: Any, version: int) -> None:
        """Hand a message of a newer wire version on to a newer worker (``wire_versions.py``)."""
        try:
            self.wire_gate.defer(message, version)
        except Exception as error:
            if isinstance(error, self.connection_errors + self.channel_errors):
                raise  # not acknowledged: the broker delivers it again once Celery has reconnected
            logger.exception(
                "Could not hand on a message of wire version %d; it goes back to its queue", version
            )
            if not message.acknowledged:
                message.reject_log_error(logger, self.connection_errors, requeue=True)

    def refuse(self, message: Any, rejection: Rejection) -> None:
        """Say so, have the failure recorded, then acknowledge ``message``, or dead-letter it when
        nothing can be recorded (see the module docstring)."""
        logger.error("Rejected %s[%s]: %s", rejection.task, rejection.task_id, rejection.reason)
        error = InvalidTaskError(describe(rejection))
        signals.task_rejected.send(sender=self, message=message, exc=error)
        if self.event_dispatcher is not None and rejection.task_id is not None:
            self.event_dispatcher.send("task-failed", uuid=rejection.task_id, exception=repr(error))
        recorder_of(self.app).submit(rejection, self._settler(message))

    def _settler(self, message: Any) -> Settle:
        """What settles ``message`` from the recorder's thread: on the worker's event loop when it
        has one (kombu's channels belong to it), else at once (a ``solo`` or ``threads`` pool)."""
        hub = getattr(self, "hub", None)

        def settle(recorded: bool) -> None:
            if hub is not None and threading.current_thread() is not threading.main_thread():
                hub.call_soon(self.settle, message, recorded)
            else:
                self.settle(message, recorded)

        return settle

    def settle(self, message: Any, recorded: bool) -> None:
        """Acknowledge a refused ``message`` whose refusal is ``recorded``, else dead-letter it."""
        if message.acknowledged:
            return
        if recorded:
            message.ack_log_error(logger, self.connection_errors)
            return
        headers = message.headers if isinstance(message.headers, dict) else {}
        name = dead_letter_queue_name(self.app.conf.task_default_queue)
        logger.error("Dead-lettered %s[%s] to %s", headers.get("task"), headers.get("id"), name)
        if self.connection is not None and self.connection.transport.driver_type == "amqp":
            message.reject_log_error(logger, self.connection_errors, requeue=False)  # x-dead-letter-*
            return
        try:
            with self.app.producer_or_acquire() as producer:
                producer.publish(
                    message.body,
                    exchange="",
                    routing_key=name,
                    headers=message.headers if isinstance(message.headers, dict) else None,
                    content_type=message.content_type or "text/plain",
                    content_encoding=message.content_encoding or "utf-8",
                    retry=True,
                )
        except Exception:  # kept unacknowledged: the broker delivers it again after its timeout
            logger.exception("Could not dead-letter a refused message; it stays unacknowledged")
            return
        message.ack_log_error(logger, self.connection_errors)

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        """A body Celery could not decode: refused like any other (the body is not logged)."""
        reason = f"its body cannot be decoded: {type(exc).__name__}: {exc}"
        self.refuse(message, rejection_of(message, reason))

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        """A message Celery found invalid (a bad ETA, a content type it does not accept)."""
        self.refuse(message, rejection_of(message, f"{type(exc).__name__}: {exc}", body))

    def shutdown(self) -> None:
        """Stop consuming, then write the refusals still waiting."""
        super().shutdown()
        recorder_of(self.app).close()


class DeadLetterQueue(bootsteps.StartStopStep):  # type: ignore[misc]
    """A consumer bootstep: on RabbitMQ, declare the queue the worker's queues dead-letter to (their
    ``x-dead-letter-routing-key``, ``<queue>.dead``: ``config.queue_config``), so a message past its
    delivery limit that even its last delivery could not settle is kept there for an operator, not
    dropped. No worker consumes it."""

    requires = ("celery.worker.consumer.connection:Connection",)

    def start(self, c: Any) -> None:
        """Declare each dead-letter queue named by the queues ``c`` consumes (durable, quorum)."""
        from kombu.entity import Queue

        names = {
            str(queue.queue_arguments["x-dead-letter-routing-key"])
            for queue in c.app.amqp.queues.values()
            if "x-dead-letter-routing-key" in (queue.queue_arguments or {})
        }
        if not names or c.connection is None or c.connection.transport.driver_type != "amqp":
            return
        with c.connection.channel() as channel:
            for name in sorted(names):
                queue: Any = Queue(name, durable=True, queue_arguments={"x-queue-type": "quorum"})  # type: ignore[no-untyped-call]
                queue(channel).declare()


def install_edge(app: Celery, *, store: RunStore | None = None) -> None:
    """Make :class:`EdgeConsumer` ``app``'s worker consumer; refusals recorded in ``store`` when given.

    Without ``store`` the recorder opens its own on the settings' ``database_url``
    at the first refusal. Nothing changes for clients: the consumer exists only in workers.
    """
    app.conf.worker_consumer = f"{EdgeConsumer.__module__}:{EdgeConsumer.__qualname__}"
    app.steps["consumer"].add(DeadLetterQueue)
    app.agentloop_rejections = RejectionRecorder(app, store=store)

"""A worker thread inside this process, for apps on ``memory://`` and ``cache+memory://``.

:func:`embedded_worker` runs Celery's own ``start_worker`` for the length of a
``with`` block: the demo runs on it, and so do tests whose queues live in the
test process. Real deployments start workers with ``celery -A agentloop worker``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from agentloop.orchestration.errors import WorkerStartError
from agentloop.orchestration.settings.broker import Broker
from agentloop.orchestration.wire import PING

__all__ = ["embedded_worker", "is_embedded"]


def is_embedded(worker: Any) -> bool:
    """Whether ``worker`` (a worker bootstep's parent) is an embedded one (:func:`embedded_worker`,
    Celery's ``TestWorkController``): it shares its process with other work, so the bootsteps that
    set process-wide state (the collector's, the tasks' event loop) leave that process alone."""
    from celery.contrib.testing.worker import TestWorkController

    return isinstance(worker, TestWorkController)


def _as_current_app(app: Any, target: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``target(*args, **kwargs)`` with ``app`` as this thread's current app for the call."""
    from celery import _state

    previous = getattr(_state._tls, "current_app", None)
    _state._tls.current_app = app
    try:
        return target(*args, **kwargs)
    finally:
        _state._tls.current_app = previous


def _own_app_pool(pool: str) -> Any:
    """Celery's ``solo`` or ``threads`` pool, each task run with the worker's app as the current app.

    Without a prefork child, a worker runs a task through ``celery.app.trace.trace_task_ret``,
    which looks the task up on ``current_app``: in a thread with none, the *default* app, which
    ``start_worker`` sets to the app of the worker started last. Two embedded workers in one process
    (two apps in a notebook, a test session) then ran each other's messages with the wrong app's
    tasks, registry and store. Any other pool is returned as it is.
    """
    from celery.concurrency import get_implementation

    base = get_implementation(pool)
    if pool not in ("solo", "threads"):
        return base

    class OwnAppPool(base):  # type: ignore[misc,valid-type]
        def apply_async(self, target: Any, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
            return super().apply_async(partial(_as_current_app, self.app, target), args, kwargs, **options)

    OwnAppPool.__name__ = OwnAppPool.__qualname__ = f"OwnApp{base.__name__}"
    return OwnAppPool


class _StoppedChannel:
    """A channel whose every poll says the connection is gone (``OSError``): what ends Celery's
    blocking loop at once once the worker is told to stop (it swallows the error then)."""

    def drain_events(self, *args: Any, **kwargs: Any) -> None:
        raise OSError("the embedded worker stopped")

    def close(self) -> None:
        """Nothing to close."""


def _polled_transport(app: Any, worker: Any) -> Any:
    """The transport the worker's loop polls, on ``memory://`` (``None`` on other brokers)."""
    if not Broker.of(str(app.conf.broker_url or "")).in_process:
        return None
    connection = getattr(worker.consumer, "connection", None)
    return None if connection is None else connection.transport


def _wake_for_shutdown(transport: Any) -> None:
    """Let an embedded worker on ``memory://`` stop at once rather than after 2 s.

    Celery's blocking loop polls the broker for up to 2 s per round and looks at the worker's
    state between rounds. On the polling memory transport nothing ends a round early: stopping the
    worker cancels its consumers, so no message (a ping) reaches the round left waiting. So the
    round's transport (``transport``, the worker connection's, which the stop closed) gets a
    channel that raises ``OSError`` when polled, within the transport's 10 ms polling interval;
    the loop, told to stop, takes it as the lost connection of a worker stopping and ends. Other
    transports (``None``) are left alone: their loop wakes on its own.
    """
    if transport is not None:
        transport.channels.append(_StoppedChannel())


@contextmanager
def _worker_thread(app: Any, *, shutdown_timeout: float, **options: Any) -> Iterator[Any]:
    """A ``WorkController`` for ``app`` running in a thread for the block; stopped alone after it.

    What ``celery.contrib.testing.worker.start_worker`` does, but for its end: Celery stops its
    test worker by setting the process-wide ``celery.worker.state.should_terminate`` and never
    clears it, which ended every other embedded worker of the process too (a long-lived one, as
    ``agentloop serve``'s or a test session's, stopped when a short one's block ended, and its runs
    stayed ``running``). This worker is stopped by its own ``stop()``.
    """
    from celery.contrib.testing.worker import TestWorkController, setup_app_for_worker
    from celery.result import _set_task_join_will_block
    from celery.utils.nodenames import anon_nodename

    setup_app_for_worker(app, options["loglevel"], None)
    worker = TestWorkController(
        app=app,
        hostname=options.pop("hostname", anon_nodename()),
        logfile=None,
        ready_callback=None,
        without_heartbeat=options.pop("without_heartbeat", True),
        without_mingle=True,
        without_gossip=True,
        **options,
    )
    thread = threading.Thread(target=worker.start, daemon=True, name=f"embedded-worker-{app.main}")
    thread.start()
    worker.ensure_started()
    _set_task_join_will_block(False)
    try:
        yield worker
    finally:
        transport = _polled_transport(app, worker)  # before the stop, which closes its connection
        worker.stop(in_sighandler=False)
        _wake_for_shutdown(transport)
        thread.join(shutdown_timeout)
        if thread.is_alive():
            raise WorkerStartError(f"the embedded worker did not stop within {shutdown_timeout} s")


@contextmanager
def _root_logger_kept() -> Iterator[None]:
    """The root logger's level and handlers as they were before the block (a worker sets its own)."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        root.setLevel(level)
        root.handlers[:] = handlers


@contextmanager
def embedded_worker(
    app: Any,
    *,
    pool: str = "solo",
    concurrency: int = 1,
    loglevel: str = "WARNING",
    ping_check: bool = True,
    ping_timeout: float = 10.0,
    shutdown_timeout: float = 10.0,
    **kwargs: Any,
) -> Iterator[Any]:
    """Run a worker thread for ``app`` in this process for the ``with`` block; yields the ``WorkController``.

    Starts Celery's test worker as ``celery.contrib.testing.worker.start_worker`` does (mingle,
    gossip and heartbeats off), and stops it alone (:func:`_worker_thread`). Made for apps on ``memory://`` / ``cache+memory://``,
    whose queues live in this process. With ``ping_check`` it waits until
    the worker has run :data:`~agentloop.orchestration.wire.PING` (Celery's own
    check needs ``celery.ping``, which agentloop apps do not register).

    ``start_worker`` makes ``app`` Celery's current and default app; both are
    restored on exit. Two settings of ``app`` are changed: ``worker_hijack_root_logger``
    is switched off so the worker leaves pytest's logging alone, and on
    ``memory://`` the transport's ``polling_interval`` defaults to 10 ms (kombu
    polls every second otherwise). Other keyword arguments go to
    ``start_worker`` (e.g. ``hostname``).
    """
    from celery import _state

    previous_default = _state.default_app
    previous_current = _state._tls.current_app
    app.conf.worker_hijack_root_logger = False
    if Broker.of(str(app.conf.broker_url or "")).in_process:
        options = dict(app.conf.broker_transport_options or {})
        options.setdefault("polling_interval", 0.01)
        app.conf.broker_transport_options = options
    try:
        with (
            _root_logger_kept(),
            _worker_thread(
                app,
                pool=_own_app_pool(pool),
                concurrency=concurrency,
                loglevel=loglevel,
                shutdown_timeout=shutdown_timeout,
                **kwargs,
            ) as worker,
        ):
            if ping_check:
                reply = app.send_task(PING).get(timeout=ping_timeout, interval=0.01)
                if reply != "pong":
                    raise WorkerStartError(f"embedded worker answered {reply!r} to {PING}")
            yield worker
    finally:
        _state.set_default_app(previous_default)
        _state._tls.current_app = previous_current

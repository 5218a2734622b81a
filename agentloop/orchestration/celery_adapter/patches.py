"""Workarounds for defects of the libraries underneath, applied in worker processes only.

:func:`install_worker_patches` adds a worker bootstep to an app (Celery's
documented per-app hook, ``app.steps["worker"]``): when, and only when, that
app's worker starts, the step applies each patch below whose library version
is known to have the defect. A client or a test that only sends tasks never
changes a library. Each patch is idempotent and names its upstream issue.

**kombu, Redis transport: restoring unacknowledged messages on a dead connection.**
When the broker connection is lost while a task with late acknowledgement is
running, kombu closes the dead channel and ``QoS.restore_unacked`` tries to put
its unacknowledged messages back. It opens a new client from connection
parameters that are already gone (``Channel._connparams`` reads
``self.connection.client.hostname`` of a closed connection) and the
``AttributeError: 'NoneType' object has no attribute 'hostname'`` it raises is
fatal to the worker ("Unrecoverable error"). Upstream: the restore path is
celery/kombu#970 (https://github.com/celery/kombu/issues/970, restore of
unacknowledged messages through ``conn_or_acquire`` failing, messages left
unrestored), the error on a closed connection celery/kombu#582
(https://github.com/celery/kombu/issues/582). The code path is the same in
kombu 5.4 to 5.7 (5.7.0 verified by ``tests/integration/test_broker_restart.py``,
which restarts Redis under a running task). The messages are safe where they
are: Redis returns them to the queue after the visibility timeout, so the patch
makes that one restore give way (with a warning) instead of killing the worker.

**kombu, Redis transport: acknowledging a message of a dead connection.** The
same defect on the other side: a task that was running when the connection was
lost (the worker lets it finish: ``worker_cancel_long_running_tasks_on_connection_loss``
is off, see ``config.py``) is acknowledged or rejected on its old, closed channel
once it ends; ``QoS.ack`` reaches for that channel's connection, gone, and the
``AttributeError`` is fatal to the worker too. The patch lets the acknowledgement
go (with a warning): the message returns after the visibility timeout and finds
its step ended in the run store.

**kombu, Redis transport: a new redis-py client for every command it sends.**
``Channel.conn_or_acquire`` builds a ``redis.Redis`` over the channel's
connection pool each time it is not handed one: for every message published,
every event (``task-sent``, ``task-started``...), every acknowledgement. A
redis-py client holds no connection of its own (each command borrows one from
the pool), but building one copies and re-cases redis-py's table of about 170
response callbacks: redis/redis-py#3624 (https://github.com/redis/redis-py/issues/3624,
proposed fix redis/redis-py#4124). A threads worker that ran 1,000 model-bound
runs four times built 19,800 of them, about 50 µs each (some 2 % of its CPU).
The patch makes each channel build one such client per connection pool and hand it to every
caller: commands from several threads share it safely, as they would share its
pool (pipelines and pub/sub objects stay per use); a pool kombu replaces (after
a lost connection) gets a client of its own. kombu 5.4 to 5.7 build a client per
call (read in kombu's source, 5.7.0 measured by ``bench/model_bound``).

**Celery: an ignored task's traceback formatted twice, read by nobody.** A task that replaces
itself (``Task.replace``: ``agentloop.launch`` with its run's canvas, a composite with its
branches) ends by raising ``Ignore``, and Celery's tracer builds two ``ExceptionInfo`` of it, each
a pickleable copy of the traceback and ``traceback.format_exception`` of it (on Python 3.11,
source lines read and parsed for each frame's carets): one in ``TraceInfo.handle_ignore``, with
the ``repr`` of the task's arguments, for a "Task ... ignored" line at ``INFO`` that the logger
drops when ``INFO`` is not logged (a worker's default level is ``WARNING``); one as the task's
outcome, sent to the worker's main process, which only looks at its exception to acknowledge the
message. Together they were about a third of ``agentloop.launch``'s Python. The patch builds the
first only when the tracer's logger logs ``INFO`` (a worker started with ``--loglevel INFO`` logs
the same line as before), and the second without the traceback (its exception alone). Celery 5.3
to 5.7 (read in 5.7.0's ``celery/app/trace.py`` and ``celery/worker/request.py``;
``bench.celery_overhead.fixed_tasks`` measures it).
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import celery
import kombu
from celery import Celery, bootsteps

__all__ = [
    "CELERY_IGNORE_LOGGED_ALWAYS",
    "KOMBU_CLIENT_PER_CALL",
    "KOMBU_RESTORE_DEFECT",
    "WorkerPatches",
    "apply_worker_patches",
    "celery_ignore_is_patched",
    "install_worker_patches",
    "kombu_ack_is_patched",
    "kombu_client_is_shared",
    "kombu_redis",
    "kombu_restore_is_patched",
    "light_ignored_outcomes",
    "mend_ack_on_dead_connection",
    "mend_restore_unacked",
    "quiet_ignored_tasks",
    "share_channel_client",
    "version_within",
]

logger = logging.getLogger(__name__)

#: kombu versions (major, minor) known to have the restore defect: from 5.4 up to, not including, 5.8.
KOMBU_RESTORE_DEFECT = ((5, 4), (5, 8))

#: kombu versions (major, minor) whose Redis channel builds a redis-py client per command: 5.4 to 5.7.
KOMBU_CLIENT_PER_CALL = ((5, 4), (5, 8))

#: Celery versions (major, minor) whose tracer formats an ignored task's traceback unread: 5.3 to 5.7.
CELERY_IGNORE_LOGGED_ALWAYS = ((5, 3), (5, 8))

_PATCHED = "_agentloop_patched"
#: Where a patched channel keeps its shared client (in the instance's ``__dict__``).
_SHARED_CLIENT = "_agentloop_shared_client"


def version_within(version: tuple[int, ...], versions: tuple[tuple[int, int], tuple[int, int]]) -> bool:
    """Whether a library's ``version`` is in ``versions`` (``(first, beyond)``, major and minor)."""
    first, beyond = versions
    return first <= tuple(version[:2]) < beyond


def kombu_redis() -> Any:
    """kombu's Redis transport module, or ``None`` without its client library."""
    try:
        from kombu.transport import redis as transport
    except ImportError:  # the Redis transport's client library is missing: nothing to mend
        return None
    return transport


def _redis_qos() -> Any:
    transport = kombu_redis()
    return None if transport is None else transport.QoS


def kombu_restore_is_patched() -> bool:
    """Whether this process runs kombu's Redis ``QoS.restore_unacked`` with the workaround."""
    qos = _redis_qos()
    return qos is not None and getattr(qos.restore_unacked, _PATCHED, False)


def mend_restore_unacked(qos: Any) -> None:
    """Make ``qos.restore_unacked`` (a kombu Redis ``QoS`` class) give way on a dead connection.

    Only an ``AttributeError`` raised while the channel's connection has no
    client any more is swallowed (and logged); any other error propagates.
    """
    original: Any = qos.restore_unacked

    @functools.wraps(original)
    def restore_unacked(self: Any, client: Any = None) -> Any:
        try:
            return original(self, client)
        except AttributeError:
            if getattr(getattr(self.channel, "connection", None), "client", True) is not None:
                raise  # not the dead-connection case: a real error
            logger.warning(
                "broker connection already gone: unacknowledged messages return to the queue "
                "after the visibility timeout"
            )
            return None

    setattr(restore_unacked, _PATCHED, True)
    qos.restore_unacked = restore_unacked


def _connection_gone(channel: Any) -> bool:
    connection = getattr(channel, "connection", None)
    return connection is None or getattr(connection, "client", True) is None


def mend_ack_on_dead_connection(qos: Any) -> None:
    """Make ``qos.ack`` and ``qos.reject`` (a kombu Redis ``QoS`` class) give way on a dead connection.

    Only an ``AttributeError`` raised while the channel has no connection (or its connection no
    client) any more is swallowed (and logged); any other error propagates.
    """
    for name in ("ack", "reject"):
        original: Any = getattr(qos, name)
        if getattr(original, _PATCHED, False):
            continue

        def settle(self: Any, delivery_tag: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            try:
                return _original(self, delivery_tag, *args, **kwargs)
            except AttributeError:
                if not _connection_gone(self.channel):
                    raise  # not the dead-connection case: a real error
                logger.warning(
                    "broker connection gone before message %s was settled: it returns to the queue "
                    "after the visibility timeout and finds its step ended",
                    delivery_tag,
                )
                return None

        functools.update_wrapper(settle, original)
        setattr(settle, _PATCHED, True)
        setattr(qos, name, settle)


def kombu_ack_is_patched() -> bool:
    """Whether this process runs kombu's Redis ``QoS.ack`` with the workaround."""
    qos = _redis_qos()
    return qos is not None and getattr(qos.ack, _PATCHED, False)


def kombu_client_is_shared() -> bool:
    """Whether kombu's Redis channels of this process share one client per pool (the patch above)."""
    transport = kombu_redis()
    return transport is not None and getattr(transport.Channel.conn_or_acquire, _PATCHED, False)


def _shared_client(channel: Any) -> Any:
    """The client ``channel`` shares over its current connection pool (built at its first use).

    Two threads that ask at once may each build one; the last stays, both are valid.
    """
    pool = channel.pool  # kombu builds the pool here when it has none (after a lost connection)
    client = channel.__dict__.get(_SHARED_CLIENT)
    if client is None or client.connection_pool is not pool:
        client = channel._create_client()
        channel.__dict__[_SHARED_CLIENT] = client
    return client


def share_channel_client(channel_class: Any) -> None:
    """Make ``channel_class.conn_or_acquire`` (a kombu Redis ``Channel`` class) hand out the
    channel's one shared client instead of building a new one per call; a client passed in
    is used as before."""

    @contextmanager
    def conn_or_acquire(self: Any, client: Any = None) -> Iterator[Any]:
        yield client if client else _shared_client(self)

    setattr(conn_or_acquire, _PATCHED, True)
    conn_or_acquire.__wrapped__ = channel_class.conn_or_acquire  # type: ignore[attr-defined]
    channel_class.conn_or_acquire = conn_or_acquire


def _trace() -> Any:
    """Celery's tracer module (imported when a patch is asked for, not with this module)."""
    from celery.app import trace

    return trace


def celery_ignore_is_patched() -> bool:
    """Whether this process's Celery tracer formats an ignored task's traceback only to log it."""
    trace = _trace()
    patched = (trace.TraceInfo.handle_ignore, trace.ExceptionInfo)
    return all(getattr(function, _PATCHED, False) for function in patched)


def quiet_ignored_tasks(trace_info: Any) -> None:
    """Make ``trace_info.handle_ignore`` (Celery's ``TraceInfo``) do its work, building the log
    record of an ignored task, only when the tracer's logger logs ``INFO`` (the record's level)."""
    trace = _trace()
    original: Any = trace_info.handle_ignore

    @functools.wraps(original)
    def handle_ignore(self: Any, task: Any, req: Any, **kwargs: Any) -> Any:
        if trace.logger.isEnabledFor(trace.log_policy_ignore.severity):
            return original(self, task, req, **kwargs)
        return None

    setattr(handle_ignore, _PATCHED, True)
    trace_info.handle_ignore = handle_ignore


def light_ignored_outcomes(trace: Any) -> None:
    """Make the tracer (``trace``: the module ``celery.app.trace``) record an ignored task's
    outcome (``ExceptionInfo(internal=True)`` inside ``except Ignore``) without its traceback:
    a billiard ``ExceptionInfo`` holding the exception alone. Any other ``ExceptionInfo`` it
    builds is built as before."""
    from billiard.einfo import ExceptionInfo, ExceptionWithTraceback
    from celery.exceptions import Ignore

    full: Any = trace.ExceptionInfo

    @functools.wraps(full)
    def exception_info(exc_info: Any = None, internal: bool = False) -> Any:
        if internal and exc_info is None:
            kind, exception, _ = sys.exc_info()
            if isinstance(exception, Ignore):
                light = ExceptionInfo.__new__(ExceptionInfo)
                light.type, light.tb, light.traceback, light.internal = kind, None, "", True
                light.exception = ExceptionWithTraceback(exception, "")
                return light
        return full(exc_info, internal)

    setattr(exception_info, _PATCHED, True)
    trace.ExceptionInfo = exception_info


def apply_worker_patches(
    kombu_version: tuple[int, ...] = tuple(kombu.VERSION[:2]),
    celery_version: tuple[int, ...] = tuple(celery.VERSION[:2]),
) -> tuple[str, ...]:
    """Apply, in this process, the patches the installed library versions need; the names of those applied.

    Idempotent. Meant for worker processes; :class:`WorkerPatches` calls it at worker start.
    """
    applied: list[str] = []
    if version_within(celery_version, CELERY_IGNORE_LOGGED_ALWAYS):
        trace = _trace()
        if not getattr(trace.TraceInfo.handle_ignore, _PATCHED, False):
            quiet_ignored_tasks(trace.TraceInfo)
        if not getattr(trace.ExceptionInfo, _PATCHED, False):
            light_ignored_outcomes(trace)
        applied.append("celery-ignored-task-traceback")
    transport = kombu_redis()
    if transport is None:
        return tuple(applied)
    if version_within(kombu_version, KOMBU_RESTORE_DEFECT):
        if not kombu_restore_is_patched():
            mend_restore_unacked(transport.QoS)
        applied.append("kombu-redis-restore-unacked")
        if not kombu_ack_is_patched():
            mend_ack_on_dead_connection(transport.QoS)
        applied.append("kombu-redis-ack-on-dead-connection")
    if version_within(kombu_version, KOMBU_CLIENT_PER_CALL):
        if not kombu_client_is_shared():
            share_channel_client(transport.Channel)
        applied.append("kombu-redis-shared-client")
    return tuple(applied)


class WorkerPatches(bootsteps.Step):  # type: ignore[misc]
    """A worker bootstep: applies :func:`apply_worker_patches` when the app's worker is built."""

    name = "agentloop.worker_patches"

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        applied = apply_worker_patches()
        if applied:
            logger.debug("library patches applied at worker start: %s", ", ".join(applied))


def install_worker_patches(app: Celery) -> None:
    """Have ``app``'s workers apply the library patches when they start (and nothing before). Idempotent."""
    app.steps["worker"].add(WorkerPatches)

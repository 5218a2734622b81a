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

**Celery 5.7, Redis result backend: a chord part's return is not retried on a lost connection.**
When a task of a chord's header ends, ``RedisBackend.on_chord_part_return`` counts it in one Lua
script, and the part that completes the count claims the right to send the chord's callback (the
merge) with a token, then extends and clears that claim in two more scripts. A Redis connection
lost in any of them (a Redis restart) raises redis-py's ``ConnectionError`` out of the task after
its work is done: the task fails, and with it the run, though its step succeeded (the fault suite's
``Redis restarted``: 2 of 212 scenario runs, "ConnectionError Connection closed by server."). Results
and messages are retried while Redis is away (``result_backend_always_retry``, the publish retry
policy); these scripts are not. Upstream, the same class of defect: celery/celery#3363
(https://github.com/celery/celery/issues/3363, a socket error in ``on_chord_part_return`` loses
the chord). :func:`retry_chord_scripts` runs each script again through the backend's own
``ensure`` (its retry policy, about 20 s), as ``RedisBackend.set`` is. Running one again is safe:
the count script counts a part once (its set of parts seen), the other two check the token. One
case needs more: when the count script ran and its reply was lost, the retry finds the claim
taken (by this very call) and would send no callback, and the chord would never end. redis-py's
own retry of the command (three tries) does the same unseen. So when a count completes unclaimed,
:class:`RetriedScript` reads the claim and takes it as its own when it holds this call's token
(a new one for each call). Not covered: the last part's read of the parts' results, between the
scripts (a lost connection there still fails its task). Celery 5.7 (``celery/backends/redis.py``,
read in 5.7.0; earlier versions not checked).
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import celery
import kombu
from celery import Celery, bootsteps
from kombu.utils import encoding as kombu_encoding

__all__ = [
    "CELERY_CHORD_SCRIPTS_UNRETRIED",
    "CELERY_IGNORE_LOGGED_ALWAYS",
    "KOMBU_CLIENT_PER_CALL",
    "KOMBU_RESTORE_DEFECT",
    "RetriedScript",
    "WorkerPatches",
    "apply_worker_patches",
    "celery_ignore_is_patched",
    "chord_scripts_are_retried",
    "install_worker_patches",
    "kombu_ack_is_patched",
    "kombu_client_is_shared",
    "kombu_redis",
    "kombu_restore_is_patched",
    "light_ignored_outcomes",
    "mend_ack_on_dead_connection",
    "mend_restore_unacked",
    "quiet_ignored_tasks",
    "retry_chord_scripts",
    "share_channel_client",
    "text_of",
    "version_within",
]

logger = logging.getLogger(__name__)

#: kombu versions (major, minor) known to have the restore defect: from 5.4 up to, not including, 5.8.
KOMBU_RESTORE_DEFECT = ((5, 4), (5, 8))

#: kombu versions (major, minor) whose Redis channel builds a redis-py client per command: 5.4 to 5.7.
KOMBU_CLIENT_PER_CALL = ((5, 4), (5, 8))

#: Celery versions (major, minor) whose tracer formats an ignored task's traceback unread: 5.3 to 5.7.
CELERY_IGNORE_LOGGED_ALWAYS = ((5, 3), (5, 8))

#: Celery versions (major, minor) whose Redis result backend runs a chord part's return in scripts
#: it does not retry: 5.7.
CELERY_CHORD_SCRIPTS_UNRETRIED = ((5, 7), (5, 8))

#: ``RedisBackend``'s chord scripts (cached properties), each with whether a retry of it must
#: take back a claim its lost first run made (the count script's, :class:`RetriedScript`).
_CHORD_SCRIPTS = (
    ("_chord_part_return_script", True),
    ("_chord_claim_extend_script", False),
    ("_chord_cleanup_script", False),
)

#: kombu's ``bytes_to_str`` (untyped): a Redis reply, bytes or text, as text.
text_of: Callable[[Any], str] = kombu_encoding.bytes_to_str

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


class RetriedScript:
    """One of a Redis result backend's chord scripts, run again while Redis is away (the module
    doc): through the backend's ``ensure``, as its ``set`` is. With ``reclaims`` (the count
    script), an answer that completes the count unclaimed while the chord's claim holds this
    call's own token (``args[7]``, in ``keys[5]``) is the answer of a run whose reply was lost
    (here, or in redis-py's own retry of the command): it answers as the run that took it."""

    def __init__(self, backend: Any, script: Any, *, reclaims: bool) -> None:
        self.backend = backend
        self.script = script
        self.reclaims = reclaims

    def __call__(self, keys: Any = (), args: Any = (), client: Any = None) -> Any:
        answer = self.backend.ensure(lambda: self.script(keys=keys, args=args, client=client), ())
        return self._reclaimed(answer, keys, args, client) if self.reclaims else answer

    def _reclaimed(self, answer: Any, keys: Any, args: Any, client: Any) -> Any:
        ready, added, size, claimed = answer
        if ready == -1 or claimed or not size or int(ready) != int(size) + int(added or 0):
            return answer  # a late copy, a claim made, or a count not complete: as it is
        redis = client if client is not None else self.backend.client
        holder = self.backend.ensure(lambda: redis.get(keys[5]), ())
        if holder is not None and text_of(holder) == str(args[7]):  # the token is new to each call
            logger.warning("chord part %s counted again after a lost reply: the claim is its own", args[0])
            return [ready, added, size, 1]
        return answer


def _redis_backend() -> Any:
    """Celery's Redis result backend class, or ``None`` where it has no chord scripts to retry."""
    from celery.backends.redis import RedisBackend

    present = all(hasattr(RedisBackend, name) for name, _ in _CHORD_SCRIPTS)
    return RedisBackend if present else None


def chord_scripts_are_retried(backend_class: Any = None) -> bool:
    """Whether ``backend_class`` (Celery's ``RedisBackend`` by default) runs its chord scripts
    through :class:`RetriedScript`."""
    backend_class = backend_class if backend_class is not None else _redis_backend()
    if backend_class is None:
        return False
    return all(_retried(inspect.getattr_static(backend_class, name)) for name, _ in _CHORD_SCRIPTS)


def _retried(script: Any) -> bool:
    """Whether ``script`` (a chord script's cached property) builds a :class:`RetriedScript`."""
    return bool(getattr(getattr(script, "func", None), _PATCHED, False))


def retry_chord_scripts(backend_class: Any) -> None:
    """Make ``backend_class`` (Celery's ``RedisBackend``, or a subclass) run each of its chord
    scripts through :class:`RetriedScript`. Idempotent."""
    for name, reclaims in _CHORD_SCRIPTS:
        original = inspect.getattr_static(backend_class, name)
        if _retried(original):
            continue

        def build(backend: Any, _make: Any = original.func, _reclaims: bool = reclaims) -> RetriedScript:
            return RetriedScript(backend, _make(backend), reclaims=_reclaims)

        setattr(build, _PATCHED, True)
        script = functools.cached_property(build)
        script.__set_name__(backend_class, name)
        setattr(backend_class, name, script)


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
    backend = _redis_backend()
    if backend is not None and version_within(celery_version, CELERY_CHORD_SCRIPTS_UNRETRIED):
        retry_chord_scripts(backend)  # idempotent
        applied.append("celery-redis-chord-scripts-retried")
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

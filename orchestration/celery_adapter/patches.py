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
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import kombu
from celery import Celery, bootsteps

__all__ = [
    "KOMBU_RESTORE_DEFECT",
    "WorkerPatches",
    "apply_worker_patches",
    "install_worker_patches",
    "kombu_restore_is_patched",
    "mend_restore_unacked",
]

logger = logging.getLogger(__name__)

#: kombu versions (major, minor) known to have the restore defect: from 5.4 up to, not including, 5.8.
KOMBU_RESTORE_DEFECT = ((5, 4), (5, 8))

_PATCHED = "_agentloop_patched"


def _kombu_has_restore_defect(version: tuple[int, ...]) -> bool:
    first, beyond = KOMBU_RESTORE_DEFECT
    return first <= tuple(version[:2]) < beyond


def _redis_qos() -> Any:
    try:
        from kombu.transport import redis as kombu_redis
    except ImportError:  # the Redis transport's client library is missing: nothing to mend
        return None
    return kombu_redis.QoS


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


def apply_worker_patches(kombu_version: tuple[int, ...] = tuple(kombu.VERSION[:2])) -> tuple[str, ...]:
    """Apply, in this process, the patches the installed library versions need; the names of those applied.

    Idempotent. Meant for worker processes; :class:`WorkerPatches` calls it at worker start.
    """
    qos = _redis_qos()
    if qos is None or not _kombu_has_restore_defect(kombu_version):
        return ()
    if not kombu_restore_is_patched():
        mend_restore_unacked(qos)
    return ("kombu-redis-restore-unacked",)


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

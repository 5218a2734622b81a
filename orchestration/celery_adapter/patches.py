"""Workarounds for defects of the libraries underneath, each scoped as narrowly as possible.

``kombu`` (5.7, Redis transport): when the broker connection is lost while a
task with late acknowledgement is running, closing the dead channel tries to
put its unacknowledged messages back through a connection that is already
gone, and the ``AttributeError`` it raises (``'NoneType' object has no
attribute 'hostname'``) is fatal to the worker ("Unrecoverable error"). The
messages are safe where they are: Redis returns them to the queue after the
visibility timeout. :func:`install` makes that restore give way instead of
killing the worker; ``tests/integration/test_broker_restart.py`` restarts
Redis under a running task to keep this honest.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

logger = logging.getLogger(__name__)

_installed = False


def install() -> None:
    """Apply the workarounds (idempotent)."""
    global _installed
    if _installed:
        return
    try:
        from kombu.transport import redis as kombu_redis
    except ImportError:  # the Redis transport's client library is missing: nothing to mend
        return
    original: Any = kombu_redis.QoS.restore_unacked

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

    kombu_redis.QoS.restore_unacked = restore_unacked  # type: ignore[method-assign]
    _installed = True

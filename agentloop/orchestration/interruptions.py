"""The exceptions that stop the task they are raised in, which no broad ``except Exception`` on the
task's path may keep.

Celery's prefork pool raises ``SoftTimeLimitExceeded`` inside a task at its soft time limit (its
hard one, ``TimeLimitExceeded``, kills the process). Both derive from ``Exception``: caught and
logged by code that means to survive a store or Redis failure, a soft limit becomes a hard one, and
the task runs on until its process is killed (issue 21). Code that swallows failures on purpose
calls :func:`reraise_interruption` first. ``BaseException``s that are not ``Exception``s
(``asyncio.CancelledError``, ``KeyboardInterrupt``, ``SystemExit``) pass ``except Exception``
already. They come from billiard, the process pool Celery runs on (no Celery import here).
"""

from __future__ import annotations

from billiard.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded

__all__ = ["INTERRUPTIONS", "reraise_interruption"]

#: The exceptions that stop a task (see the module doc).
INTERRUPTIONS: tuple[type[Exception], ...] = (SoftTimeLimitExceeded, TimeLimitExceeded)


def reraise_interruption(error: BaseException) -> None:
    """Raise ``error`` again when it stops the task it was raised in; otherwise return."""
    if isinstance(error, INTERRUPTIONS):
        raise error

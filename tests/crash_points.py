"""Crash points for the "dies between two writes" tests: imported by a worker (``AGENTLOOP_IMPORTS``),
it kills the worker's whole process group (SIGKILL, the machine died) right after one store write.

The test arms it by writing the write's name (``settle``, ``mark_running``, ``record``) to the file
named by ``AGENTLOOP_TEST_CRASH_FILE``; the first process to make that write after it removes the
file and dies, so the worker started next runs normally. Without the variable nothing is patched.
"""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Callable
from typing import Any

from orchestration.human.waits import SqlWaitStore
from orchestration.store import SqlRunStore

CRASH_FILE = os.environ.get("AGENTLOOP_TEST_CRASH_FILE")


def _armed_for(name: str) -> bool:
    if CRASH_FILE is None:
        return False
    try:
        with open(CRASH_FILE) as armed:
            if armed.read().strip() != name:
                return False
        os.remove(CRASH_FILE)
    except OSError:  # not armed, or another process took it first
        return False
    return True


def _crashing_after(cls: type, name: str) -> None:
    written: Callable[..., Any] = getattr(cls, name)

    @functools.wraps(written)
    def write_then_die(*args: Any, **kwargs: Any) -> Any:
        result = written(*args, **kwargs)
        if _armed_for(name):
            os.killpg(os.getpgid(0), signal.SIGKILL)  # the worker and every pool process
        return result

    setattr(cls, name, write_then_die)


if CRASH_FILE is not None:
    _crashing_after(SqlWaitStore, "settle")
    _crashing_after(SqlWaitStore, "record")
    _crashing_after(SqlRunStore, "mark_running")

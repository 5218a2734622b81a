"""The event loop a worker's tasks run on: uvloop's, unless ``AGENTLOOP_EVENT_LOOP=asyncio``.

Every task of a worker runs its coroutine on its thread's event loop (``tasks.run_coroutine``),
and a pack runs hundreds of loops on one of them: their timers, wake-ups and callbacks are the
event loop's own Python in asyncio's loop (``base_events``, ``events``), about a seventh of a
packed run's worker CPU in a py-spy of 1,000 model-bound runs. uvloop (libuv, in C; the loop
uvicorn runs on) does the same work for less: 0.27-0.32 -> 0.24-0.29 ms of CPU per packed run of
``bench.packing_profile --store memory`` (three alternating pairs), and 5-30% less worker CPU per
run of 1,000 model-bound loops on two threads workers (three alternating rigs; ``bench/README.md``).
It runs what asyncio's loop runs (``asyncio.timeout`` deadlines, ``run_in_executor``,
``call_soon_threadsafe`` from a pack's threads, the SDKs' HTTP through anyio).

A worker picks its loop when it starts (:class:`TaskLoops`, a worker bootstep, before the pool
forks or starts its threads), from ``AGENTLOOP_EVENT_LOOP``: ``uvloop`` (the default, where uvloop
is installed: it is a dependency on Linux and macOS) or ``asyncio`` (asyncio's own loop: a way
back for a library that misbehaves on uvloop). Where uvloop is not installed a worker says so once
and runs asyncio's loop. A process that starts no worker (the inline runner, a client) makes
asyncio's loops as before, and so does an embedded worker (``celery_adapter/embedded.py``: tests,
``agentloop serve``, a notebook), which shares its process with other work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from celery import Celery, bootsteps

from agentloop.orchestration.celery_adapter.embedded import is_embedded
from agentloop.orchestration.settings.deployment import EVENT_LOOPS

__all__ = ["install_task_loops", "new_task_loop", "use_event_loop"]

logger = logging.getLogger(__name__)


class _Loops:
    """The kind of event loop this process's worker threads make (one choice a process, made when
    its worker starts, as an asyncio policy would be; inherited by forked pool processes)."""

    __slots__ = ("new",)

    def __init__(self) -> None:
        self.new: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop


_LOOPS = _Loops()


def new_task_loop() -> asyncio.AbstractEventLoop:
    """A new event loop for a worker thread's tasks, of the kind this process runs (module doc)."""
    return _LOOPS.new()


def use_event_loop(name: str) -> str:
    """Make :func:`new_task_loop` give loops of ``name`` (``uvloop`` or ``asyncio``) from now on;
    the kind it gives (``asyncio`` when uvloop is asked for and not installed)."""
    if name not in EVENT_LOOPS:
        raise ValueError(f"AGENTLOOP_EVENT_LOOP must be one of {', '.join(EVENT_LOOPS)}, not {name!r}")
    if name == "asyncio":
        _LOOPS.new = asyncio.new_event_loop
        return name
    try:
        import uvloop
    except ImportError:
        logger.warning("uvloop is not installed: this worker's tasks run on asyncio's event loop")
        _LOOPS.new = asyncio.new_event_loop
        return "asyncio"
    _LOOPS.new = uvloop.new_event_loop
    return name


class TaskLoops(bootsteps.Step):  # type: ignore[misc]
    """A worker bootstep: the worker's tasks run on the event loop its settings name (module doc)."""

    name = "agentloop.task_loops"

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        from agentloop.orchestration.celery_adapter.dependencies import dependencies_of

        app = getattr(parent, "app", None)
        # before the pool forks or starts its threads (they inherit the choice); an embedded
        # worker shares its process with other work, whose loops it leaves as they are
        if app is not None and not is_embedded(parent):
            use_event_loop(dependencies_of(app).settings.event_loop)


def install_task_loops(app: Celery) -> None:
    """Have ``app``'s workers run their tasks on the event loop their settings name. Idempotent."""
    app.steps["worker"].add(TaskLoops)

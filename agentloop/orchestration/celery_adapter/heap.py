"""A worker's boot-time heap, frozen out of the garbage collector's way.

A worker process holds some 140,000 tracked objects once Celery, kombu, SQLAlchemy and the task
modules are imported, none of which ever becomes garbage. CPython's full collections walk all of
them, and a task that makes many objects at once (a pack of hundreds of loops starting together,
``docs/how-to/packing.md``) sets off collections that do: over half of a packed branch's start.
Once the worker has imported everything, :func:`gc.freeze` moves those objects into the
collector's permanent generation, which no collection walks (the standard advice for
pre-forking servers, https://docs.python.org/3/library/gc.html#gc.freeze). Objects made later,
the runs' own, are collected as before; only cyclic garbage made before boot ends would be kept,
and a worker makes none it drops.

Measured on ``WorkflowEngine.start_pack`` of 1,000 branches against PostgreSQL (the CPU until each
awaits its first model call): a branch's start 170 us of CPU, 77 us with the heap frozen.

Once frozen, the youngest generation's threshold is raised to :data:`YOUNG_THRESHOLD` objects
(CPython's default: 700): a pack's branches make tens of thousands of short-lived objects a
second (events, timers, frames), most of which die before a collection, and a young collection
every 700 allocations walked the ones still alive each time. Measured the same way
(``bench.packing_profile``, 4 interleaved pairs, load 1.3-2.7): 0.290 -> 0.272 ms of CPU per
packed run. Memory grows by at most those 10,000 young objects; a setting the process made
higher is kept.

Before the pool forks, the main process also imports the model SDK the deployment's settings pick
(``ModelProvider.preload``): a pool process would import it at its first model call, 1.0-1.5 s
of CPU on a loaded 2-core host (the OpenAI processor's modules), while the runs sent to it waited;
so does every process the pool starts later, and its frozen heap holds the SDK's objects too.

The main process freezes when its bootsteps start (a threads or solo pool runs its tasks there);
each prefork pool process freezes once forked (what it inherited and imported). An embedded worker
(``celery_adapter/embedded.py``: tests, ``agentloop serve``, a notebook) lives in a process that is
not only a worker, and freezes nothing.
"""

from __future__ import annotations

import gc
from typing import Any

from celery import Celery, bootsteps, signals

from agentloop.orchestration.celery_adapter.embedded import is_embedded

__all__ = ["YOUNG_THRESHOLD", "freeze_heap", "install_heap_freeze"]

#: The youngest generation's collection threshold a worker runs with (the module doc).
YOUNG_THRESHOLD = 10_000


def freeze_heap(**_: Any) -> None:
    """Collect what is garbage now, then move every object left out of the collector's walks, and
    collect the young generation less often (the module doc)."""
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    if 0 < young < YOUNG_THRESHOLD:  # 0: collection switched off, kept so
        gc.set_threshold(YOUNG_THRESHOLD, middle, old)


class FrozenHeap(bootsteps.StartStopStep):  # type: ignore[misc]
    """A worker bootstep: freeze the heap once the worker has imported everything (the module doc)."""

    name = "agentloop.frozen_heap"

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.enabled = not is_embedded(parent)
        if self.enabled:  # connected before the pool forks: each pool process freezes its own heap
            _preload_model_sdk(getattr(parent, "app", None))
            signals.worker_process_init.connect(freeze_heap, weak=False, dispatch_uid="agentloop.frozen_heap")

    def start(self, parent: Any) -> None:
        if self.enabled:
            freeze_heap()


def _preload_model_sdk(app: Celery | None) -> None:
    """Import the model SDK ``app``'s settings pick, before the pool forks (the module doc)."""
    if app is None:
        return
    from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
    from agentloop.orchestration.llm.provider import ModelProvider

    ModelProvider(dependencies_of(app).settings.model).preload()


def install_heap_freeze(app: Celery) -> None:
    """Have ``app``'s workers freeze their boot-time heap (the module doc). Idempotent."""
    app.steps["worker"].add(FrozenHeap)

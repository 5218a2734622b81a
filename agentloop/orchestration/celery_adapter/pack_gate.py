"""A prefork worker keeps one process from packs, for the work sent beside them.

A process of the prefork pool runs one task at a time, and a pack (``agentloop.batch_pack``,
``agentloop.pack``, ``agentloop.stages``, ``agentloop.pack_collect``) holds its process until its
last run ends: about one model call's latency, whatever its size. With every process in a pack, a
run launched beside a batch waits in the broker for the first pack to end, however high its
priority: the worker takes no message while each of its processes holds one
(``bench.fairness --defaults --trace``: all of the interactive run's wait was there).

So a worker of the prefork pool that runs packs starts one process more than its concurrency
(:class:`ExtraProcess`: ``-c 2`` runs three) and reads the packs' queue (the holding queue of
:data:`~agentloop.orchestration.wire.PACK_WIRE_VERSION`, where ``pack_policy.PackRouter`` sends
every pack) only while fewer packs than its concurrency are in it (:class:`PackGate`): the packs
run on as many processes as before, and the one left takes launches, chunks and the other tasks
of the default queue as they come. Stopping the read only stops taking messages: a pack sent
meanwhile waits in its queue, and a message taken from it in the instant of the stop is handed
back by kombu (nothing is lost). With ``--autoscale``, the other pools, ``AGENTLOOP_PACK_SIZE=1``
or a wire version before packs nothing changes.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery, bootsteps, signals
from celery.worker import state as worker_state

from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.celery_adapter.pack_policy import pool_name
from agentloop.orchestration.celery_adapter.wire_versions import app_wire_version, holding_queue
from agentloop.orchestration.wire import PACK_TASKS, PACK_WIRE_VERSION

__all__ = ["ExtraProcess", "PackGate", "install_pack_gate", "packs_held"]

logger = logging.getLogger(__name__)

#: The processes a prefork worker starts beyond its concurrency, which packs never take.
KEPT_PROCESSES = 1

#: How often the gate looks whether a pack ended (s): the read resumes at most this late.
CHECK_SECONDS = 0.02


def _gated(app: Celery, pool_cls: Any, autoscale: Any) -> bool:
    """Whether a worker of ``app`` with this pool keeps a process from packs (the module doc)."""
    from celery import concurrency

    if autoscale or app_wire_version(app) < PACK_WIRE_VERSION:
        return False
    if dependencies_of(app).settings.pack_size == 1:
        return False
    return pool_name(concurrency.get_implementation(pool_cls)) == "prefork"


class ExtraProcess(bootsteps.Step):  # type: ignore[misc]
    """A worker bootstep: one process more than the worker's concurrency on prefork (the module
    doc). Made before any step creates the pool (a blueprint makes every step, then includes them)."""

    name = "agentloop.extra_process"

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        app = getattr(parent, "app", None)
        concurrency = getattr(parent, "concurrency", None)
        if app is None or type(concurrency) is not int or getattr(parent, "autoscale", None):
            return
        if not _gated(app, getattr(parent, "pool_cls", None), kwargs.get("autoscale")):
            return
        app.agentloop_pack_processes = concurrency  # what PackGate lets packs hold
        parent.concurrency = concurrency + KEPT_PROCESSES
        if getattr(parent, "min_concurrency", None) == concurrency:  # the Pool step was made first
            parent.min_concurrency = concurrency + KEPT_PROCESSES


def packs_held(current: Any = None) -> int:
    """How many packs the worker has taken and not ended (reserved or running), ``current`` (a
    request just taken, not yet among them) included."""
    requests = {*worker_state.reserved_requests, *worker_state.active_requests}
    if current is not None:
        requests.add(current)
    return sum(1 for request in requests if request.name in PACK_TASKS)


class PackGate(bootsteps.StartStopStep):  # type: ignore[misc]
    """A consumer bootstep: the packs' queue read only while fewer packs than
    ``app.agentloop_pack_processes`` are in the worker (the module doc)."""

    name = "agentloop.pack_gate"
    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.limit: int | None = getattr(c.app, "agentloop_pack_processes", None)
        self.queue = holding_queue(c.app, PACK_WIRE_VERSION)
        self.consumer: Any = None
        self.timer: Any = None
        self.paused: Any = None  # the task consumer whose read of the packs' queue is stopped

    def start(self, c: Any) -> None:
        task_consumer = c.task_consumer
        if self.limit is None or task_consumer is None:
            return  # not gated
        if self.queue not in {queue.name for queue in task_consumer.queues}:
            return  # this worker does not read packs
        self.consumer = c
        c.agentloop_pack_gate = self
        signals.task_received.connect(_on_received, weak=False, dispatch_uid="agentloop.pack_gate")
        self.timer = c.timer.call_repeatedly(CHECK_SECONDS, self.check, priority=10)

    def check(self, current: Any = None) -> None:
        """Stop reading the packs' queue once the worker holds ``limit`` packs; read it again
        once it holds fewer."""
        c, limit = self.consumer, self.limit
        task_consumer = getattr(c, "task_consumer", None)
        if task_consumer is None or limit is None:
            return
        held = packs_held(current)
        paused = self.paused is task_consumer  # a consumer made anew (a reconnect) reads every queue
        if held >= limit and not paused:
            task_consumer.cancel_by_queue(self.queue)
            self.paused = task_consumer
        elif held < limit and paused:
            self.paused = None
            queue = c.app.amqp.queues.consume_from.get(self.queue)
            if queue is not None:  # still one the worker reads (a control command may have dropped it)
                task_consumer.add_queue(queue)
                task_consumer.consume()

    def stop(self, c: Any) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.consumer is not None:
            self.consumer.agentloop_pack_gate = None
        self.consumer = None

    shutdown = stop


def _on_received(sender: Any = None, request: Any = None, **_: Any) -> None:
    """``task_received`` in the worker's main process: a pack taken may close the gate at once,
    before the consumer takes its next message."""
    gate = getattr(sender, "agentloop_pack_gate", None)
    if gate is not None and request is not None and request.name in PACK_TASKS:
        gate.check(request)


def install_pack_gate(app: Celery) -> None:
    """Have ``app``'s prefork workers keep one process from packs (the module doc). Idempotent."""
    app.steps["worker"].add(ExtraProcess)
    app.steps["consumer"].add(PackGate)

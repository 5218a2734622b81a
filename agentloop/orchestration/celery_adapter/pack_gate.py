"""A prefork worker keeps a spare process for what arrives while packs fill its others.

A process of the prefork pool runs one task at a time, and a pack (``agentloop.batch_pack``,
``agentloop.pack``, ``agentloop.stages``, ``agentloop.pack_collect``) holds its process until its
last run ends: about one model call's latency, whatever its size. With every process in a pack, a
run launched beside a batch waited in the broker for the first pack to end, however high its
priority: the worker takes no message while each of its processes holds one
(``bench.fairness --defaults --trace``: all of the interactive run's wait was there).

So a prefork worker that runs packs, of ``-c N``:

* starts ``N + 1`` processes (:class:`SpareProcess`), and takes messages as a worker of ``N``:
  its prefetch (the messages it holds unacknowledged, running or waiting) stays ``N``
  (:data:`PREFETCH_MULTIPLIER` a process), also after a reconnect (:func:`prefetch_limit`, read
  by the worker's consumer);
* reads the packs' queue (the holding queue of
  :data:`~agentloop.orchestration.wire.PACK_WIRE_VERSION`, where ``pack_policy.PackRouter`` sends
  every pack) only while it holds fewer than ``N`` packs (:class:`PackGate`);
* while it holds a pack, takes one message more: ``N + 1`` in all, of which the packs are one or
  more, so at most ``N`` are other tasks, and once packs hold ``N`` processes the one left is not
  a pack (the packs' queue is not read) and runs on the spare. The extra message is given back
  before the last pack's message is settled (:class:`GatedRequest`), so the next message the
  broker hands over counts against ``N`` again.

What ``-c N`` bounds is unchanged for everything but packs: at most ``N`` tasks that are not
packs run at once, at most ``N`` packs, and ``N + 1`` tasks in all. Stopping the read only stops
taking messages: a pack sent meanwhile waits in its queue (nothing is lost). After a broker
reconnect Celery takes new messages while the tasks that ran through it finish, on every pool; for
that moment one task more may run. With ``--autoscale``, the other pools, a prefetch multiplier
above 1 (the worker would run ``N + 1`` of what it prefetched), ``AGENTLOOP_PACK_SIZE=1`` or a
wire version before packs nothing changes.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery, bootsteps, signals
from celery.worker import state as worker_state

from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.celery_adapter.pack_policy import pool_name
from agentloop.orchestration.celery_adapter.privacy import RedactingRequest
from agentloop.orchestration.celery_adapter.wire_versions import app_wire_version, holding_queue
from agentloop.orchestration.wire import PACK_TASKS, PACK_WIRE_VERSION

__all__ = ["GatedRequest", "PackGate", "SpareProcess", "install_pack_gate", "prefetch_limit"]

logger = logging.getLogger(__name__)

#: The prefetch multiplier a gated worker runs with (Celery's ``worker_prefetch_multiplier``,
#: ``AGENTLOOP_WORKER_PREFETCH_MULTIPLIER``; the default): with more, the worker would hold more
#: messages than processes and run ``N + 1`` of them.
PREFETCH_MULTIPLIER = 1

#: How often the gate recounts its packs (s), behind the counts made as packs come and go.
CHECK_SECONDS = 0.5


def _gated(app: Celery, pool_cls: Any, autoscale: Any) -> bool:
    """Whether a worker of ``app`` with this pool keeps a spare process (the module doc)."""
    from celery import concurrency

    if autoscale or app_wire_version(app) < PACK_WIRE_VERSION:
        return False
    settings = dependencies_of(app).settings
    if settings.pack_size == 1 or app.conf.worker_prefetch_multiplier != PREFETCH_MULTIPLIER:
        return False
    return pool_name(concurrency.get_implementation(pool_cls)) == "prefork"


class SpareProcess(bootsteps.Step):  # type: ignore[misc]
    """A worker bootstep: a prefork pool of ``N + 1`` processes for a worker of ``-c N`` that runs
    packs (the module doc). After Celery's ``Pool`` step is made, before it creates the pool; the
    worker's ``concurrency``, from which its consumer's prefetch is made, stays ``N``."""

    name = "agentloop.spare_process"
    requires = ("celery.worker.components:Pool",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        app = getattr(parent, "app", None)
        concurrency = getattr(parent, "concurrency", None)
        if app is None or type(concurrency) is not int:
            return
        autoscale = getattr(parent, "autoscale", None) or kwargs.get("autoscale")
        if not _gated(app, getattr(parent, "pool_cls", None), autoscale):
            return
        app.agentloop_pack_processes = concurrency  # what PackGate lets packs hold
        parent.min_concurrency = concurrency + 1  # the pool's size (celery.worker.components.Pool)


def _packs_held(*, arriving: Any = None, leaving: Any = None) -> int:
    """How many packs the worker holds (reserved or running, not yet settled): ``arriving`` (a
    request just taken, not yet among them) counted, ``leaving`` (one being settled) not."""
    requests = {*worker_state.reserved_requests, *worker_state.active_requests}
    if arriving is not None:
        requests.add(arriving)
    requests.discard(leaving)
    return sum(1 for request in requests if request.name in PACK_TASKS and not request.acknowledged)


class PackGate(bootsteps.StartStopStep):  # type: ignore[misc]
    """A consumer bootstep: one message more taken while a pack is in the worker, and the packs'
    queue read only while fewer than ``N`` are (the module doc)."""

    name = "agentloop.pack_gate"
    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.limit: int | None = getattr(c.app, "agentloop_pack_processes", None)
        self.queue = holding_queue(c.app, PACK_WIRE_VERSION)
        self.consumer: Any = None
        self.timer: Any = None
        self.paused: Any = None  # the task consumer whose read of the packs' queue is stopped
        self.extra: Any = None  # the consumer's QoS, raised by one while the worker holds a pack
        if self.limit is not None:
            for name in PACK_TASKS:  # before Tasks.start builds the strategies that read it
                task = c.app.tasks.get(name)
                if task is not None:
                    task.Request = GatedRequest

    def start(self, c: Any) -> None:
        task_consumer = c.task_consumer
        if self.limit is None or task_consumer is None:
            return  # not gated
        if self.queue not in {queue.name for queue in task_consumer.queues}:
            return  # this worker does not read packs
        self.consumer = c
        c.app.agentloop_pack_gate = self
        signals.task_received.connect(_on_received, weak=False, dispatch_uid="agentloop.pack_gate")
        self.check()  # a consumer made anew (a reconnect): packs may already be running
        if self.timer is None:
            self.timer = c.timer.call_repeatedly(CHECK_SECONDS, self.check, priority=10)

    def check(self, *, arriving: Any = None, leaving: Any = None) -> None:
        """Take one message more while the worker holds a pack, and give it back once it holds
        none; stop reading the packs' queue once it holds ``N`` packs, and read it again once it
        holds fewer."""
        c, limit = self.consumer, self.limit
        task_consumer = getattr(c, "task_consumer", None)
        qos = getattr(c, "qos", None)
        if task_consumer is None or qos is None or limit is None:
            return
        held = _packs_held(arriving=arriving, leaving=leaving)
        # A QoS made anew (a reconnect) has no extra message; while Celery brings it back up to
        # N after the reconnect (its prefetch reduction), the extra waits: Celery's restore would
        # take it back with its own.
        restored = getattr(c, "_maximum_prefetch_restored", True)
        if held and self.extra is not qos and restored:
            qos.increment_eventually(1)  # applied by the event loop before it reads the broker again
            self.extra = qos
        elif not held and self.extra is qos:
            qos.decrement_eventually(1)  # before the pack's acknowledgement goes out: see GatedRequest
            self.extra = None
        full = held >= limit
        paused = self.paused is task_consumer  # a consumer made anew reads every queue
        if full and not paused:
            task_consumer.cancel_by_queue(self.queue)
            self.paused = task_consumer
        elif not full and paused:
            self.paused = None
            queue = c.app.amqp.queues.consume_from.get(self.queue)
            if queue is not None:  # still one the worker reads (a control command may have dropped it)
                task_consumer.add_queue(queue)
                task_consumer.consume()

    def stop(self, c: Any) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if getattr(c.app, "agentloop_pack_gate", None) is self:
            c.app.agentloop_pack_gate = None
        self.consumer = None
        self.extra = None

    shutdown = stop


def _gate_of(app: Any) -> PackGate | None:
    """The gate of the worker ``app`` runs in, while its consumer runs."""
    gate = getattr(app, "agentloop_pack_gate", None)
    return gate if isinstance(gate, PackGate) else None


def prefetch_limit(consumer: Any, processes: int, multiplier: int) -> int:
    """The prefetch Celery makes ``consumer``'s after a reconnect: its own (``processes x
    multiplier``), less the spare process. The gate adds the message taken beside ``N`` packs
    on top, once Celery has restored this (the module doc)."""
    gate = _gate_of(getattr(consumer, "app", None))
    if gate is None or gate.limit is None or gate.consumer is not consumer:
        return processes * multiplier
    return gate.limit * multiplier


def _on_received(sender: Any = None, request: Any = None, **_: Any) -> None:
    """``task_received`` in the worker's main process: a pack taken may fill the worker at once,
    before the consumer takes its next message."""
    gate = _gate_of(getattr(sender, "app", None))
    if gate is not None and request is not None and request.name in PACK_TASKS:
        gate.check(arriving=request)


class GatedRequest(RedactingRequest):
    """A pack's request: before its message is settled (acknowledged, or rejected to be delivered
    again), the gate counts the worker's packs without it, so the message taken beside the last
    pack is given back before the broker may hand over the next one (Celery applies the prefetch
    at the top of its event loop; acknowledgements go out after it, from ``call_soon``)."""

    def _leave(self) -> None:
        if not self.acknowledged:
            gate = _gate_of(self.task.app)
            if gate is not None:
                gate.check(leaving=self)

    def acknowledge(self) -> None:
        self._leave()
        super().acknowledge()

    def reject(self, requeue: bool = False) -> None:
        self._leave()
        super().reject(requeue=requeue)


def install_pack_gate(app: Celery) -> None:
    """Have ``app``'s prefork workers keep a spare process for what arrives beside packs (the
    module doc). Idempotent."""
    app.steps["worker"].add(SpareProcess)
    app.steps["consumer"].add(PackGate)

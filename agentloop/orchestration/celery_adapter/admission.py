"""A launch past its concurrency key's limit: it waits without holding a worker slot, or is refused,
or makes room by cancelling the key's oldest run (``docs/how-to/fairness.md``).

:func:`admit_launch` runs in ``agentloop.launch`` once the launch has claimed its run and before the
run starts. The run's key is the launch's ``concurrency_key``, else its runnable's rule's
(``fairness/rules.py``); without a key the run is not limited. With one, the run store's slots
(``store/concurrency.py``) decide, atomically and for every worker at once:

* **admitted**: the run starts, and every task of it carries the key (its node's
  ``concurrency_key``);
* **wait**: the launch message is sent again, with its own task id and arguments, after a
  countdown that grows with the runs waiting before it, and this delivery ends (``Ignore``): no
  worker slot is held while it waits, and its place in line is kept in the store (the order the
  runs arrived in). A worker that dies here leaves the message unacknowledged: the broker delivers
  it again, and its place is still its own;
* **refuse**: the run ends ``failed`` with :class:`~agentloop.orchestration.errors.ConcurrencyLimitError`;
* **cancel the oldest**: the key's oldest run in flight is asked to cancel and gives its slot to
  this one.
"""

from __future__ import annotations

import logging

from celery import Task
from celery.exceptions import Ignore

from agentloop.orchestration.celery_adapter.batches import _countdown
from agentloop.orchestration.celery_adapter.dependencies import AppDependencies
from agentloop.orchestration.errors import ConcurrencyLimitError
from agentloop.orchestration.fairness.rules import key_of
from agentloop.orchestration.metrics.record import key_admitted
from agentloop.orchestration.store.concurrency import Admission, ConcurrencySlots
from agentloop.orchestration.wire import LaunchRequest

__all__ = ["admit_launch", "wait_countdown"]

logger = logging.getLogger(__name__)

#: The shortest and longest wait before a waiting launch asks again.
SHORTEST_WAIT, LONGEST_WAIT = 0.5, 60.0
#: Seconds more a waiting launch waits per key-limit's worth of runs waiting before it.
WAIT_PER_ROUND = 2.0


def wait_countdown(admission: Admission) -> float:
    """How long a waiting launch waits before it asks again: half a second at the head of its
    key's line, two more seconds for every limit's worth of runs before it, at most a minute: the
    store answers the few at the head often and the thousands behind them rarely (a batch of
    5,000 behind a limit of 50 asks some 200 times a second, not 10,000)."""
    bound = max(1, admission.limit or 1)
    return min(LONGEST_WAIT, SHORTEST_WAIT + WAIT_PER_ROUND * admission.ahead / bound)


def slots_of(deps: AppDependencies) -> ConcurrencySlots | None:
    """The run store's concurrency slots (``None`` for a store without them)."""
    slots = getattr(deps.store, "concurrency", None)
    return slots if isinstance(slots, ConcurrencySlots) else None


def admit_launch(task: Task, deps: AppDependencies, run_id: str, request: LaunchRequest) -> str | None:
    """The run's concurrency key once it may start (``None``: it has none); see the module doc.

    Raises ``Ignore`` when the launch waits (sent again), :class:`ConcurrencyLimitError` when it is
    refused, ``ValueError`` when the runnable's key rule fails."""
    registration = deps.registry.get(request.runnable)
    rule = registration.concurrency
    key = key_of(rule, given=request.concurrency_key, input=request.input, context=request.context)
    slots = slots_of(deps)
    if key is None or slots is None:
        return key
    lease = max(deps.settings.concurrency_lease_seconds, request.deadline_seconds or 0.0)
    admission = slots.acquire(
        run_id=run_id,
        key=key,
        limit=rule.limit if rule is not None else None,
        on_limit=rule.on_limit if rule is not None else "wait",
        fair_slots=deps.settings.fair_slots,
        lease_seconds=lease,
    )
    result = "admitted" if admission.admitted else "refused" if admission.refused else "waited"
    key_admitted(key, result, evicted=admission.evicted is not None)
    if admission.evicted is not None:
        logger.warning("Run %s of key %r cancelled to make room for run %s", admission.evicted, key, run_id)
        deps.store.request_cancel(admission.evicted)
    if admission.admitted:
        return key
    if admission.refused:
        raise ConcurrencyLimitError(
            f"the concurrency key {key!r} has {admission.in_flight} runs in flight, its limit"
            f" is {admission.limit}: run refused"
        )
    request_of = task.request
    delivery = request_of.delivery_info or {}
    priority = request.priority if request.priority is not None else delivery.get("priority")
    task.apply_async(
        args=request_of.args,
        kwargs=request_of.kwargs,
        task_id=request_of.id,
        countdown=_countdown(task.app, wait_countdown(admission)),
        priority=priority,
    )
    raise Ignore()

"""A launch past its concurrency key's limit: it waits without holding a worker slot, or is refused,
or makes room by cancelling the key's oldest run (``docs/how-to/fairness.md``).

:func:`admit_launch` runs in ``agentloop.launch`` once the launch has claimed its run and before the
run starts. The run's key is the launch's ``concurrency_key``, else its runnable's rule's
(``fairness/rules.py``); without a key the run is not limited. With one, the run store's slots
(``store/concurrency.py``) decide, atomically and for every worker at once:

* **admitted**: the run starts, and every task of it carries the key (its node's
  ``concurrency_key``);
* **wait**: the run is *parked*: its launch message is kept with its place in line in the store,
  and this delivery ends (``Ignore``): no worker slot is held while it waits. When a run of its
  key ends (or, under fair shares, of any key), the process that ended it asks the store which
  parked runs may start now and sends their messages at once (:func:`wake_waiters`). Should that
  wake be lost (the process died between the store and the broker), the parked run's own message
  comes back after a slow backstop countdown (``fairness/shares.py``) and asks again. A worker
  that dies here leaves the message unacknowledged: the broker delivers it again, and its place
  is still its own;
* **refuse**: the run ends ``failed`` with :class:`~agentloop.orchestration.errors.ConcurrencyLimitError`;
* **cancel the oldest**: the key's oldest run in flight is asked to cancel and gives its slot to
  this one.

Every copy of a launch message this module sends carries a token in its :data:`WAKE_HEADER`
header (a client's message has none): the copy that takes the slot is recorded as its holder,
and a copy that finds the slot held by another copy (a wake and a backstop both came) runs
nothing. A redelivery, a Celery retry and a paused run's resumption keep their message's headers,
so they are the holder's own copy and go on.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from celery import Celery, Task
from celery.exceptions import Ignore

from agentloop.orchestration.celery_adapter.dependencies import AppDependencies, dependencies_of
from agentloop.orchestration.errors import ConcurrencyLimitError, LaunchRequestError
from agentloop.orchestration.fairness.rules import key_of, weight_of
from agentloop.orchestration.fairness.shares import backstop_seconds
from agentloop.orchestration.metrics.record import key_admitted
from agentloop.orchestration.settings.broker import Broker
from agentloop.orchestration.store.concurrency import ConcurrencySlots, SlotKind
from agentloop.orchestration.wire import LAUNCH, LaunchRequest

__all__ = [
    "WAKE_HEADER",
    "admit_launch",
    "key_of_ended_launch",
    "key_of_run",
    "park_launches",
    "wake_all",
    "wake_waiters",
]

logger = logging.getLogger(__name__)

#: The header of a launch message's copy sent by this module: its token (the module doc).
WAKE_HEADER = "agentloop_wake"


def slots_of(deps: AppDependencies) -> ConcurrencySlots | None:
    """The run store's concurrency slots (``None`` for a store without them)."""
    slots = getattr(deps.store, "concurrency", None)
    return slots if isinstance(slots, ConcurrencySlots) else None


def copy_of(task: Task) -> str | None:
    """The token of the message copy ``task`` runs (``None``: a copy no wake sent)."""
    headers = getattr(task.request, "headers", None) or {}
    token = headers.get(WAKE_HEADER) if isinstance(headers, Mapping) else None
    token = token if token is not None else getattr(task.request, WAKE_HEADER, None)
    return token if isinstance(token, str) else None


def _message_of(task: Task, request: LaunchRequest) -> dict[str, Any]:
    """What a parked launch is sent again as: its task, arguments, task id and priority."""
    asked = task.request
    delivery = asked.delivery_info or {}
    priority = request.priority if request.priority is not None else delivery.get("priority")
    return {
        "task": task.name,
        "args": list(asked.args or ()),
        "kwargs": dict(asked.kwargs or {}),
        "task_id": asked.id,
        "priority": priority,
    }


def send_copy(app: Celery, message: Mapping[str, Any], countdown: float | None = None) -> str:
    """Send a copy of a parked launch ``message`` (after ``countdown`` s); the copy's token."""
    token = uuid.uuid4().hex
    # as a countdown the broker keeps (whole seconds on RabbitMQ: ``batches._countdown``)
    delay = None if countdown is None else Broker.of(str(app.conf.broker_url or "")).countdown(countdown)
    options = message.get("options")
    if isinstance(options, Mapping):  # a parked branch task: its chord, chain and group go with it
        headers = {**(options.get("headers") or {}), WAKE_HEADER: token}
        sent = app.signature(
            str(message["task"]), args=message.get("args") or (), kwargs=message.get("kwargs")
        )
        sent.apply_async(**{**options, "headers": headers, "countdown": delay})
        return token
    app.send_task(
        str(message["task"]),
        args=message.get("args") or (),
        kwargs=message.get("kwargs") or {},
        task_id=message.get("task_id"),
        priority=message.get("priority"),
        countdown=delay,
        headers={WAKE_HEADER: token},
    )
    return token


def admit_launch(task: Task, deps: AppDependencies, run_id: str, request: LaunchRequest) -> str | None:
    """The run's concurrency key once it may start (``None``: it has none); see the module doc.

    Raises ``Ignore`` when the launch waits (parked) or another copy of it holds its slot,
    :class:`ConcurrencyLimitError` when it is refused, ``LaunchRequestError`` when the runnable's
    key or weight rule fails."""
    registration = deps.registry.get(request.runnable)
    rule = registration.concurrency
    key = key_of(rule, given=request.concurrency_key, input=request.input, context=request.context)
    slots = slots_of(deps)
    if key is None or slots is None:
        return key
    lease = max(deps.settings.concurrency_lease_seconds, request.deadline_seconds or 0.0)
    message = _message_of(task, request)
    admission = slots.acquire(
        run_id=run_id,
        key=key,
        limit=rule.limit if rule is not None else None,
        on_limit=rule.on_limit if rule is not None else "wait",
        fair_slots=deps.settings.fair_slots,
        lease_seconds=lease,
        weight=weight_of(rule, key),
        copy=copy_of(task),
        message=message,
    )
    if admission.duplicate:
        logger.info(
            "Run %s of key %r holds its slot by another copy of its launch: this one runs nothing",
            run_id,
            key,
        )
        raise Ignore()
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
    if admission.carrier:  # sent before it is noted: a death between the two leaves two, never none
        seconds = backstop_seconds(admission.ahead, admission.limit)
        slots.parked(run_id, backstop=send_copy(task.app, message, seconds), seconds=seconds)
    raise Ignore()


def park_launches(
    app: Celery, runnable: str, launches: list[dict[str, Any]], priority: int
) -> list[dict[str, Any]]:
    """Park a batch chunk's launches of ``runnable`` (each a launch's keyword arguments, its
    ``run_id`` given) in their keys' lines at once, without a message each, and send those that
    may start now; the launches left to send one by one (no key, a runnable that refuses or
    cancels past its limit rather than waiting, a key rule that fails, a store without slots).

    A batch of 5,000 behind a limit of 50 puts some 50 launches on the broker, not 5,000 that each
    ask and park: the rest are sent as runs of their key end (``wake_waiters``), and the batch's
    summary wakes any whose wake was lost (``batches.batch_summary``)."""
    deps = dependencies_of(app)
    rule, slots = deps.registry.get(runnable).concurrency, slots_of(deps)
    if slots is None or (rule is not None and rule.on_limit != "wait"):
        return list(launches)
    lines: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    alone: list[dict[str, Any]] = []
    weights: dict[str, int] = {}
    for kwargs in launches:
        try:
            key = key_of(
                rule,
                given=kwargs.get("concurrency_key"),
                input=kwargs.get("input"),
                context=kwargs.get("context") or {},
            )
            weight = 1 if key is None else weight_of(rule, key)
        except LaunchRequestError:
            key = None  # its own launch records why
        if key is None:
            alone.append(kwargs)
            continue
        message = {
            "task": LAUNCH,
            "args": [],
            "kwargs": kwargs,
            "task_id": kwargs["run_id"],
            "priority": priority,
        }
        lines.setdefault(key, []).append((str(kwargs["run_id"]), message))
        weights[key] = weight
    for key, waiters in lines.items():
        slots.park(
            key=key,
            waiters=waiters,
            limit=rule.limit if rule is not None else None,
            weight=weights.get(key, 1),
        )
    for key in lines:
        wake_waiters(app, key)
    return alone


def wake_all(app: Celery) -> int:
    """Send the parked runs of every key that may start now (a batch's summary, while it waits,
    wakes those whose wake was lost); how many were sent."""
    return wake_waiters(app, None, every_key=True)


#: The keys being woken in this process, each with whether a run ended meanwhile (``wake_waiters``).
_waking: dict[tuple[int, str, str | None], bool] = {}
_waking_lock = threading.Lock()


def wake_waiters(app: Celery, key: str | None, *, every_key: bool = False, kind: SlotKind = "run") -> int:
    """After a run of ``key`` ended: send the parked runs that may start now (of ``key``, or of
    any key under fair shares); how many were sent. ``kind="branch"``: after a branch task of
    ``key`` ended, the parked branches of its line of branch slots. A store or broker out of reach is logged:
    the parked runs' backstop copies come back on their own.

    One thread of a process wakes a key at a time: a run of the key that ends meanwhile only
    asks it to go round once more, so a key's thousand runs ending together make a few wakes,
    not a thousand transactions queued on the key's lock (each holding a database connection)."""
    if key is None and not every_key:
        return 0
    deps = dependencies_of(app)
    slots = slots_of(deps)
    if slots is None:
        return 0
    # a line of branch slots is bounded by its branch limit alone, never by fair shares
    fair_slots = None if kind == "branch" else deps.settings.fair_slots
    waking = (id(app), kind, key)
    with _waking_lock:
        if waking in _waking:
            _waking[waking] = True  # the thread waking it goes round once more
            return 0
        _waking[waking] = False
    sent = 0
    try:
        while True:
            sent += _wake_once(app, slots, fair_slots, key, kind)
            with _waking_lock:
                if not _waking[waking]:
                    return sent
                _waking[waking] = False
    finally:
        with _waking_lock:
            _waking.pop(waking, None)


def _wake_once(
    app: Celery, slots: ConcurrencySlots, fair_slots: int | None, key: str | None, kind: SlotKind
) -> int:
    try:
        wakes = slots.wake(fair_slots=fair_slots, keys=None if key is None else [key], kind=kind)
    except Exception:
        logger.warning(
            "The parked runs of key %r could not be woken (their backstops will ask)", key, exc_info=True
        )
        return 0
    sent = 0
    for wake in wakes:
        try:
            send_copy(app, wake.message)
        except Exception:
            logger.warning(
                "Parked run %s could not be woken (its backstop will ask)", wake.run_id, exc_info=True
            )
            continue
        sent += 1
    return sent


def key_of_run(app: Celery, run_id: str) -> str | None:
    """The key of the root run ``run_id`` (``None``: it has none): one read of its slot row."""
    slots = slots_of(dependencies_of(app))
    return None if slots is None else slots.keys_of([run_id]).get(run_id)


def key_of_ended_launch(app: Celery, run_id: str, arguments: Mapping[str, Any]) -> str | None:
    """The key of a launch's run that failed (``arguments``: the launch's keywords): its
    ``concurrency_key``, else the store's word when its runnable has a concurrency rule."""
    given = arguments.get("concurrency_key")
    if isinstance(given, str):
        return given
    deps = dependencies_of(app)
    runnable, slots = arguments.get("runnable"), slots_of(deps)
    if slots is None or not isinstance(runnable, str) or runnable not in deps.registry:
        return None
    if deps.registry.get(runnable).concurrency is None:
        return None
    return key_of_run(app, run_id)

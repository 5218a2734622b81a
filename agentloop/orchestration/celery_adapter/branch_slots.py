"""A keyed run's branches past its key's branch limit: parked and woken as launches are
(``docs/how-to/fairness.md``, ``celery_adapter/admission.py``).

A task that runs a node below a composite (a branch, or a stage or branch inside one) of a run
whose key's rule sets ``Concurrency.branch_limit`` takes a *branch slot* of the key before it
runs: a row of the run store's slots (``store/concurrency.py``, of kind ``branch``) named after
the run and the branch's path (:func:`~agentloop.orchestration.store.concurrency.branch_holder`),
in the key's line of branch slots, shared by every run of the key on every worker. Past the limit
the task is parked: the message it came in (its chord, chain and group with it) is kept with its
place in line, the delivery ends (``Ignore``), and the end of another branch task of the key
sends it again at once; a slow backstop copy comes back should that wake be lost. The slot is
given up when the task ends (a Celery retry keeps it: its copy goes on with it); its lease is
the fallback for a worker that died holding it, whose redelivered message keeps it.

A pack (``agentloop.pack``) takes the slots of all its branches at once, in one row counted as
their number, and waits until there is room for all of them; a keyed composite under a branch
limit is packed at most that many branches to a task (``canvas.fan_out``), so a pack always fits.
Nothing changes for a run without a key (its node says so: no store read) or whose runnable sets
no branch limit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from celery import Celery, Task
from celery.exceptions import Ignore, Retry

from agentloop.orchestration.celery_adapter.admission import copy_of, send_copy, slots_of, wake_waiters
from agentloop.orchestration.celery_adapter.dependencies import dependencies_of
from agentloop.orchestration.fairness.shares import backstop_seconds
from agentloop.orchestration.store.concurrency import branch_holder
from agentloop.orchestration.wire import WorkflowNode

__all__ = ["abandon_branch", "branch_limit_of", "branch_slot"]

logger = logging.getLogger(__name__)

#: The options of a parked task's message sent again with it (what Celery's own retry keeps).
_KEPT = (
    "task_id", "root_id", "parent_id", "group_id", "group_index", "chord", "chain", "link",
    "link_error", "reply_to", "priority", "queue", "exchange", "routing_key", "headers", "shadow",
    "time_limit", "soft_time_limit", "replaced_task_nesting",
)  # fmt: skip

#: The root runnable of each keyed run seen in this process (a run's runnable never changes).
_runnables: dict[tuple[int, str], str | None] = {}
_runnables_lock = threading.Lock()
_RUNNABLES_KEPT = 4096


def branch_limit_of(app: Celery, node: WorkflowNode) -> int | None:
    """The branch limit of ``node``'s run: its root runnable's ``Concurrency.branch_limit`` when
    the run has a key (``None`` without one, and then nothing is read)."""
    if node.concurrency_key is None:
        return None
    deps = dependencies_of(app)
    cached = (id(deps), node.run_id)
    with _runnables_lock:
        known = cached in _runnables
        runnable = _runnables.get(cached)
    if not known:
        record = deps.store.get_run(node.run_id)
        runnable = None if record is None else record.runnable
        with _runnables_lock:
            if len(_runnables) >= _RUNNABLES_KEPT:
                _runnables.clear()
            _runnables[cached] = runnable
    if runnable is None or runnable not in deps.registry:
        return None
    rule = deps.registry.get(runnable).concurrency
    return None if rule is None else rule.branch_limit


def _is_branch(node: WorkflowNode) -> bool:
    return any(ancestor.kind == "composite" for ancestor in node.ancestors)


def _message_of(task: Task) -> dict[str, Any]:
    """What a parked branch task is sent again as: its task, arguments and message options."""
    asked = task.request
    options = task.signature_from_request().options
    kept = {name: options[name] for name in _KEPT if options.get(name) is not None}
    return {
        "task": task.name,
        "args": list(asked.args or ()),
        "kwargs": dict(asked.kwargs or {}),
        "task_id": asked.id,
        "options": {**kept, "task_id": asked.id},
    }


@contextmanager
def branch_slot(task: Task, node: WorkflowNode, pack: list[str] | None = None) -> Iterator[None]:
    """Run the ``with`` block holding a branch slot of ``node``'s key when its run's rule sets a
    branch limit (see the module doc); raises ``Ignore`` when the task is parked, or another copy
    of its message holds (or held) its slot. ``pack``: the paths of the branches of composite
    ``node`` the task runs together, which take their slots at once (one row, of their number)."""
    if node.concurrency_key is None or task.request.called_directly:
        yield
        return
    if not pack and not _is_branch(node):
        yield
        return
    limit = branch_limit_of(task.app, node)
    deps = dependencies_of(task.app)
    slots = slots_of(deps)
    if limit is None or slots is None:
        yield
        return
    key = node.concurrency_key
    holder = branch_holder(node.run_id, pack[0] if pack else node.path)
    message = _message_of(task)
    left = 0.0 if node.deadline is None else node.deadline - time.time()
    admission = slots.acquire(
        run_id=holder,
        key=key,
        kind="branch",
        limit=limit,
        lease_seconds=max(deps.settings.concurrency_lease_seconds, left),
        weight=len(pack) if pack else 1,
        copy=copy_of(task),
        message=message,
    )
    if admission.duplicate:
        logger.info(
            "Branch %s of run %s holds its slot by another copy: this one runs nothing",
            node.path,
            node.run_id,
        )
        raise Ignore()
    if not admission.admitted:
        if admission.carrier:  # sent before it is noted: a death between the two leaves two, never none
            seconds = backstop_seconds(admission.ahead, admission.limit)
            slots.parked(holder, backstop=send_copy(task.app, message, seconds), seconds=seconds)
        raise Ignore()
    retried = False
    try:
        yield
    except Retry:
        retried = True  # its retry's copy goes on with the slot
        raise
    finally:
        if not retried:
            slots.release(holder)
            wake_waiters(task.app, key, kind="branch")


def abandon_branch(task: Task, data: Any) -> None:
    """A task of a keyed run that ended runs nothing (``tasks.admitted``): the place in line its
    branch waited in is given up, so the key's other runs' branches are not held up behind it
    until its lease ends (``data``: the node as sent; no store write without a key). A slot held
    by another copy of the branch's message (running still) stays that copy's."""
    if not isinstance(data, Mapping):
        return
    key, run_id, path = data.get("concurrency_key"), data.get("run_id"), data.get("path")
    if not (isinstance(key, str) and isinstance(run_id, str) and isinstance(path, str) and path):
        return
    slots = slots_of(dependencies_of(task.app))
    if slots is None:
        return
    try:
        slots.release(branch_holder(run_id, path), waiting=True)
    except Exception:  # its lease frees it: a store out of reach must not hide why the task ends
        logger.warning("The branch slot of %s of ended run %s was not given up", path, run_id, exc_info=True)
        return
    wake_waiters(task.app, key, kind="branch")

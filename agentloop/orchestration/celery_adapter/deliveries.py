"""Whether a task may have run before, and the ``fresh`` mark of the nodes it passes on.

Every loop's task, fresh or not, starts with one statement (``RunStore.start_loops``: a pack's
for all its branches) that counts the delivery (the delivery limit on every broker) and reads
what an earlier try of the same node left: a result (a duplicate whose twin finished) or a
checkpoint (a try that died). A duplicate is not always flagged (a producer's retry, a copy
sent twice), so the read never depends on the mark. The mark of
:attr:`~agentloop.orchestration.wire.WorkflowNode.fresh` still travels (a pipeline's close reads
it, and older workers skip the read on it), and is earned and lost here:

* the launch marks the root node fresh when it created the run and is on its
  first delivery; the engine's children inherit the mark of the node they
  expand from;
* a task that may have run before (:func:`first_delivery` is false: the broker
  redelivered its message, or Celery retried it) unmarks its own node, and so
  every node it expands, and every node of the chain that follows it
  (:func:`unmark_chain`): Celery publishes that chain's next task from this
  task's message, so a second try would publish it twice;
* a paused task's message, which resuming sends again, is unmarked
  (:func:`unmarked_signature`): it ran before, and resumes from its checkpoint.

Should two copies run at once all the same, nothing is rewritten:
:meth:`~agentloop.orchestration.store.RunStore.finish_loop` keeps the first result a loop
recorded and the task returns that one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from celery import Task

from agentloop.orchestration.wire import WorkflowNode

#: The keys that tell a node (``WorkflowNode.to_dict``) among a signature's arguments.
_NODE_KEYS = frozenset({"run_id", "runnable", "path", "ancestors", "fresh"})


def first_delivery(task: Task) -> bool:
    """Whether no earlier try of ``task``'s message can have run: not redelivered by the broker
    (RabbitMQ's flag, or kombu's on a Redis message it restores), not a Celery retry, not
    called directly."""
    request = task.request
    if request.called_directly or request.retries:
        return False
    delivery = request.delivery_info or {}
    return not delivery.get("redelivered", False)


def node_of(task: Task, node: WorkflowNode) -> WorkflowNode:
    """The node a task was sent, unmarked (with the chain after it) unless this is its first try."""
    if node.fresh and not first_delivery(task):
        unmark_chain(task)
        return replace(node, fresh=False)
    return node


def unmark_chain(task: Task) -> None:
    """Unmark the nodes of the chain Celery sends on after ``task`` (its message's ``chain``)."""
    for signature in task.request.chain or ():
        _unmark(signature)


def unmarked_signature(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` (a signature as a dict) with every node in it unmarked, in place."""
    _unmark(message)
    return message


def _unmark(signature: Any) -> None:
    if not isinstance(signature, Mapping):
        return
    arguments = signature.get("args") or ()
    keywords = signature.get("kwargs") or {}
    for value in (*arguments, *keywords.values()):
        if isinstance(value, dict) and value.keys() >= _NODE_KEYS:
            value["fresh"] = False
        elif isinstance(value, Mapping) and "task" in value:  # a chord's body
            _unmark(value)
        elif isinstance(value, list | tuple):  # a chain's or a group's tasks, a chord's header
            for item in value:
                _unmark(item)

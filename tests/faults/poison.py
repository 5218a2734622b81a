"""Poison messages: what a buggy or hostile producer can put on the worker's queue.

Each kind reaches the queue the way such a producer would: a plain Celery ``send_task`` (the
deeply nested kwargs), or a raw message with Celery's protocol-2 headers for ``agentloop.launch``
and a body no agentloop client would send. Every message has a task id, the run id a client would
wait on. Nothing in them can run code: the pickle is of plain data, the YAML has no tags.
"""

from __future__ import annotations

import json
import pickle
import uuid
from collections.abc import Callable
from typing import Any

from celery import Celery

from agentloop.orchestration.wire import LAUNCH

from .rig import QUEUE

#: The embed part of a protocol-2 body: no callbacks, no chain.
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
_KWARGS = {"runnable": "parity.count", "input": 1}


def nested(depth: int) -> Any:
    """A JSON value ``depth`` lists deep."""
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def launch_headers(task_id: str) -> dict[str, Any]:
    """The headers Celery's protocol 2 puts on an ``agentloop.launch`` message."""
    return {
        "lang": "py",
        "task": LAUNCH,
        "id": task_id,
        "shadow": None,
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": "()",
        "kwargsrepr": "{}",
        "origin": "faults-suite",
        "ignore_result": False,
    }


def publish_raw(app: Celery, task_id: str, body: bytes, content_type: str, encoding: str = "utf-8") -> None:
    """Put one ``agentloop.launch`` message with this body on the queue, as is."""
    with app.connection_for_write() as connection:
        connection.Producer().publish(
            body,
            exchange="",
            routing_key=QUEUE,
            content_type=content_type,
            content_encoding=encoding,
            headers=launch_headers(task_id),
            correlation_id=task_id,
            delivery_mode=2,
            retry=True,
        )


def _json(value: Any) -> Callable[[Celery, str], None]:
    def send(app: Celery, task_id: str) -> None:
        publish_raw(app, task_id, json.dumps(value).encode(), "application/json")

    return send


def _deep_kwargs(app: Celery, task_id: str) -> None:
    kwargs = {"runnable": "parity.count", "input": nested(900)}
    app.send_task(LAUNCH, kwargs=kwargs, task_id=task_id, queue=QUEUE)


def _pickle(app: Celery, task_id: str) -> None:
    body = pickle.dumps(([], _KWARGS, _EMBED), protocol=pickle.HIGHEST_PROTOCOL)
    publish_raw(app, task_id, body, "application/x-python-serialize", "binary")


def _yaml(app: Celery, task_id: str) -> None:
    body = "- []\n- runnable: parity.count\n  input: 1\n- {callbacks: null, errbacks: null, chain: null}\n"
    publish_raw(app, task_id, body.encode(), "application/x-yaml")


def _json_too_deep(app: Celery, task_id: str) -> None:
    depth = 100_000
    body = '[[], {"runnable": "parity.count", "input": ' + "[" * depth + "]" * depth + "}, {}]"
    publish_raw(app, task_id, body.encode(), "application/json")


#: Each kind of poison and how to send it (``app``: a plain Celery app on the broker).
POISONS: dict[str, Callable[[Celery, str], None]] = {
    "non_list_body": _json({"a": 1}),
    "wrong_shape_list": _json([[], [1, 2], {}]),
    "kwargs_900_deep": _deep_kwargs,
    "pickle_content": _pickle,
    "yaml_content": _yaml,
    "json_too_deep": _json_too_deep,
}


def send_poison(app: Celery, kind: str) -> str:
    """Send one poison message of ``kind``; its task id."""
    task_id = str(uuid.uuid4())
    POISONS[kind](app, task_id)
    return task_id

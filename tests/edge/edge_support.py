"""What the edge tests share: the rig a fixture builds, and a way to send a worker any message.

:func:`send_raw` publishes exactly the headers and body a test gives, the way a hostile or broken
producer would.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from agentloop.orchestration.store import RunStore
from tests.services.worker import WorkerProcess


@dataclass
class EdgeRig:
    """A client app, the worker it talks to, and the run store both share."""

    app: Any
    store: RunStore
    worker: WorkerProcess
    broker_url: str


def send_raw(
    app: Any,
    *,
    name: str,
    body: Any,
    task_id: str | None = None,
    headers: dict[str, Any] | None = None,
    content_type: str = "application/json",
) -> str:
    """Publish one task message with exactly these headers and body; returns its task id.

    ``body`` is serialised as JSON unless it is ``bytes`` (then sent as is, with ``content_type``).
    Headers default to what Celery's own producer would write for ``name`` and ``task_id``.
    """
    task_id = task_id or str(uuid.uuid4())
    message_headers: dict[str, Any] = {
        "lang": "py",
        "task": name,
        "id": task_id,
        "root_id": task_id,
        "parent_id": None,
        "group": None,
        "retries": 0,
        "timelimit": [None, None],
        "argsrepr": "()",
        "kwargsrepr": "{}",
        "origin": "edge-tests",
    }
    message_headers.update(headers or {})
    queue = app.conf.task_default_queue
    with app.producer_or_acquire() as producer:
        options: dict[str, Any] = {"content_type": content_type, "content_encoding": "utf-8"}
        if not isinstance(body, bytes):
            options = {"serializer": "json"}
        producer.publish(
            body,
            exchange=queue,
            routing_key=queue,
            headers=message_headers,
            declare=[app.amqp.queues[queue]],
            **options,
        )
    return task_id

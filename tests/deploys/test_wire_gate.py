"""The worker's side of the wire version, without a worker: on Celery's in-memory broker, a message
too new for the worker is published again with its deferral count one higher, then acknowledged;
past the bound it goes to its version's holding queue; a failed publish puts it back unacked."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kombu import Queue

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.edge_consumer import EdgeConsumer
from agentloop.orchestration.celery_adapter.wire_versions import MAX_DEFERRALS, WireGate, too_new
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.wire import DEFERRALS_HEADER, WIRE_HEADER

MEMORY = {"broker_url": "memory://", "result_backend": "cache+memory://"}


@pytest.fixture
def app() -> Iterator[Any]:
    queue = f"gate-{uuid.uuid4().hex[:8]}"  # the memory broker is one per process: a queue per test
    app = create_app(
        store=InMemoryRunStore(),
        overrides={**MEMORY, "task_default_queue": queue},
    )
    try:
        yield app
    finally:
        app.close()


class Delivered:
    """What the gate reads of a kombu message, and whether it was acknowledged or rejected."""

    def __init__(self, app: Any, headers: dict[str, Any]) -> None:
        queue = app.conf.task_default_queue
        self.headers = {"task": "agentloop.launch", "id": "t-1", **headers}
        self.body = b'[[], {"runnable": "x"}, {}]'
        self.content_type, self.content_encoding = "application/json", "utf-8"
        self.properties = {"correlation_id": "t-1", "priority": 3, "delivery_tag": "x"}
        self.delivery_info = {"exchange": queue, "routing_key": queue}
        self.acknowledged = self.requeued = False

    def ack(self) -> None:
        self.acknowledged = True

    def reject_log_error(self, logger: Any, errors: Any, requeue: bool = False) -> None:
        self.requeued = requeue


def take(app: Any, queue_name: str) -> Any:
    """The next message on ``queue_name``, or ``None``."""
    with app.connection_for_write() as connection:
        queue = Queue(queue_name, exchange=app.amqp.queues[app.conf.task_default_queue].exchange)
        return queue(connection.default_channel).get(no_ack=True)


def test_a_message_is_deferred_to_its_queue_then_parked_after_the_bound(app: Any) -> None:
    gate = WireGate(app)
    queue = app.conf.task_default_queue
    app.amqp.queues.select_add(queue)
    with app.connection_for_write() as connection:
        app.amqp.queues[queue](connection.default_channel).declare()

    assert gate.version == 1 and gate.holding_queues() == []
    first = Delivered(app, {WIRE_HEADER: 2})
    assert too_new(first.headers, gate.version) == 2
    assert gate.defer(first, 2) == queue
    again = take(app, queue)
    assert first.acknowledged
    assert (again.headers[DEFERRALS_HEADER], again.headers[WIRE_HEADER], again.headers["id"]) == (1, 2, "t-1")
    assert again.body == first.body and again.properties["priority"] == 3

    last = Delivered(app, {WIRE_HEADER: 2, DEFERRALS_HEADER: MAX_DEFERRALS})
    assert gate.defer(last, 2) == f"the holding queue {queue}.wire.2"
    assert take(app, queue) is None
    parked = take(app, f"{queue}.wire.2")
    assert parked.headers[DEFERRALS_HEADER] == MAX_DEFERRALS + 1 and last.acknowledged


def test_a_worker_of_version_3_reads_the_holding_queues_of_2_and_3_and_never_defers_them(app: Any) -> None:
    from agentloop.orchestration.settings import load_settings

    newer = create_app(
        settings=load_settings({"AGENTLOOP_WIRE_VERSION_OVERRIDE": "3"}),
        overrides={**MEMORY, "task_default_queue": "q"},
    )
    try:
        gate = WireGate(newer)
        assert gate.holding_queues() == ["q.wire.2", "q.wire.3"]
        assert too_new({WIRE_HEADER: 3}, gate.version) is None and too_new({}, gate.version) is None
        assert too_new({WIRE_HEADER: 4}, gate.version) == 4
    finally:
        newer.close()


def test_a_failed_hand_on_leaves_the_message_on_its_queue_unacknowledged(
    app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    consumer = EdgeConsumer.__new__(EdgeConsumer)
    consumer.app, consumer.wire_gate = app, WireGate(app)
    consumer.connection_errors, consumer.channel_errors = (ConnectionError,), ()

    def broken(message: Any, version: int) -> str:
        raise RuntimeError("no producer")

    monkeypatch.setattr(consumer.wire_gate, "defer", broken)
    message = Delivered(app, {WIRE_HEADER: 2})
    consumer.defer(message, 2)
    assert message.requeued and not message.acknowledged

    def disconnected(message: Any, version: int) -> str:
        raise ConnectionError("broker gone")

    monkeypatch.setattr(consumer.wire_gate, "defer", disconnected)
    with pytest.raises(ConnectionError):  # Celery reconnects; the broker delivers it again
        consumer.defer(Delivered(app, {WIRE_HEADER: 2}), 2)

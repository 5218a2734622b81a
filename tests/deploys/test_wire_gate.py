"""The worker's side of the wire version, without a worker: on Celery's in-memory broker, a message
too new for the worker is parked at once in its version's holding queue, its deferral count one
higher, then acknowledged, and the holding queue is never added to what the worker consumes; a
failed publish puts it back unacked; a version absurdly far ahead is refused at the edge."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kombu import Queue

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.edge import check_message
from agentloop.orchestration.celery_adapter.edge_consumer import EdgeConsumer
from agentloop.orchestration.celery_adapter.wire_versions import (
    WireGate,
    holding_queue_entity,
    reported_queues,
    too_new,
)
from agentloop.orchestration.settings import load_settings
from agentloop.orchestration.store import InMemoryRunStore
from agentloop.orchestration.wire import DEFERRALS_HEADER, MAX_VERSIONS_AHEAD, WIRE_HEADER

MEMORY = {"broker_url": "memory://", "result_backend": "cache+memory://"}


@pytest.fixture
def wire_v1_app() -> Iterator[Any]:
    queue = f"gate-{uuid.uuid4().hex[:8]}"  # the memory broker is one per process: a queue per test
    wire_v1_app = create_app(  # a worker of a release before issue 39 (wire version 1)
        settings=load_settings({"AGENTLOOP_WIRE_VERSION_OVERRIDE": "1"}),
        store=InMemoryRunStore(),
        overrides={**MEMORY, "task_default_queue": queue},
    )
    try:
        yield wire_v1_app
    finally:
        wire_v1_app.close()


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


def test_a_message_is_parked_at_once_in_its_versions_holding_queue_never_consumed(wire_v1_app: Any) -> None:
    gate = WireGate(wire_v1_app)
    queue = wire_v1_app.conf.task_default_queue
    consumed = set(wire_v1_app.amqp.queues.consume_from)
    known = set(wire_v1_app.amqp.queues)

    assert gate.version == 1 and gate.holding_queues() == []
    first = Delivered(wire_v1_app, {WIRE_HEADER: 2})
    assert too_new(first.headers, gate.version) == 2
    assert gate.defer(first, 2) == f"the holding queue {queue}.wire.2"
    assert first.acknowledged and take(wire_v1_app, queue) is None
    parked = take(wire_v1_app, f"{queue}.wire.2")
    assert (parked.headers[DEFERRALS_HEADER], parked.headers[WIRE_HEADER], parked.headers["id"]) == (
        1,
        2,
        "t-1",
    )
    assert parked.body == first.body and parked.properties["priority"] == 3

    # a message an older release handed back ten times: its count is read and goes on
    older = Delivered(wire_v1_app, {WIRE_HEADER: 3, DEFERRALS_HEADER: 10})
    gate.defer(older, 3)
    assert take(wire_v1_app, f"{queue}.wire.3").headers[DEFERRALS_HEADER] == 11
    # issue 33, item 1: neither holding queue is consumed after a reconnect, nor even known
    assert set(wire_v1_app.amqp.queues.consume_from) == consumed and set(wire_v1_app.amqp.queues) == known


def test_a_holding_queue_is_declared_like_the_default_queue(wire_v1_app: Any) -> None:
    rabbit = create_app(overrides={**MEMORY, "broker_url": "amqp://guest@localhost//"})
    try:
        for each in (wire_v1_app, rabbit):
            main = each.amqp.queues[each.conf.task_default_queue]
            holding = holding_queue_entity(each, 2)
            assert holding.name == holding.routing_key == f"{main.name}.wire.2"
            assert (holding.exchange, holding.durable) == (main.exchange, main.durable)
            assert holding.queue_arguments == (main.queue_arguments or {})
        arguments = holding_queue_entity(rabbit, 2).queue_arguments
        assert arguments["x-queue-type"] == "quorum" and arguments["x-delivery-limit"] > 0
        assert arguments["x-dead-letter-routing-key"] == "agentloop.dead"
        newer = create_app(
            settings=load_settings(
                {"AGENTLOOP_WIRE_VERSION_OVERRIDE": "3", "BROKER_URL": "amqp://guest@localhost//"}
            ),
            overrides={"result_backend": "cache+memory://"},
        )
        try:
            WireGate(newer).consume_holding_queues()  # the consuming side declares them the same way
            for name in ("agentloop.wire.2", "agentloop.wire.3"):
                assert name in newer.amqp.queues.consume_from
                assert newer.amqp.queues[name].queue_arguments == arguments
        finally:
            newer.close()
    finally:
        rabbit.close()


def test_a_version_more_than_the_bound_ahead_is_refused_as_malformed() -> None:
    body = b'[[], {"runnable": "x"}, {}]'

    class Message:
        def __init__(self, version: int) -> None:
            self.headers = {"task": "agentloop.launch", "id": "t-1", WIRE_HEADER: version}
            self.body, self.content_type, self.content_encoding = body, "application/json", "utf-8"
            self.payload = [[], {"runnable": "x"}, {}]

    assert check_message(Message(1 + MAX_VERSIONS_AHEAD), 1) is None  # parked for a newer worker
    for forged in (2 + MAX_VERSIONS_AHEAD, 10**20):
        refused = check_message(Message(forged), 1)
        assert refused is not None and "wire version" in refused.reason and refused.task_id == "t-1"
    assert check_message(Message(3 + MAX_VERSIONS_AHEAD), 3) is None  # the bound is the worker's


def test_the_reported_queues_are_a_bounded_set_whatever_was_parked(wire_v1_app: Any) -> None:
    before = reported_queues(wire_v1_app)
    queue = wire_v1_app.conf.task_default_queue
    assert f"{queue}.dead" in before
    assert [name for name in before if ".wire." in name] == [
        f"{queue}.wire.{version}" for version in range(2, 2 + MAX_VERSIONS_AHEAD)
    ]
    gate = WireGate(wire_v1_app)
    for version in range(2, 2 + MAX_VERSIONS_AHEAD):
        gate.defer(Delivered(wire_v1_app, {WIRE_HEADER: version}), version)
    assert reported_queues(wire_v1_app) == before


def test_a_worker_of_version_3_reads_the_holding_queues_of_2_and_3_and_never_defers_them(
    wire_v1_app: Any,
) -> None:
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
    wire_v1_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    consumer = EdgeConsumer.__new__(EdgeConsumer)
    consumer.app, consumer.wire_gate = wire_v1_app, WireGate(wire_v1_app)
    consumer.connection_errors, consumer.channel_errors = (ConnectionError,), ()

    def broken(message: Any, version: int) -> str:
        raise RuntimeError("no producer")

    monkeypatch.setattr(consumer.wire_gate, "defer", broken)
    message = Delivered(wire_v1_app, {WIRE_HEADER: 2})
    consumer.defer(message, 2)
    assert message.requeued and not message.acknowledged

    def disconnected(message: Any, version: int) -> str:
        raise ConnectionError("broker gone")

    monkeypatch.setattr(consumer.wire_gate, "defer", disconnected)
    with pytest.raises(ConnectionError):  # Celery reconnects; the broker delivers it again
        consumer.defer(Delivered(wire_v1_app, {WIRE_HEADER: 2}), 2)


def test_on_rabbitmq_a_holding_queue_left_classic_by_an_older_release_still_takes_parked_messages(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Releases before issue 33 declared holding queues classic, without arguments: the quorum
    declare is refused (PRECONDITION_FAILED); the message is parked in the queue as it is, with a
    warning, never refused and never looped through reconnects."""
    from tests.services.rabbitmq import list_queues, private_rabbitmq
    from tests.services.redis_server import ServiceUnavailable

    try:
        context = private_rabbitmq()
        target = context.__enter__()
    except ServiceUnavailable as unavailable:
        pytest.skip(unavailable.reason)
    try:
        if not target.private:
            pytest.skip("rabbitmqctl cannot make a private vhost here")
        rabbit = create_app(
            settings=load_settings({"BROKER_URL": target.url, "DATABASE_URL": "sqlite://"}),
            overrides={"result_backend": "cache+memory://"},
        )
        try:
            main = rabbit.amqp.queues["agentloop"]
            with rabbit.connection_for_write() as connection:  # what the older release declared
                old: Any = Queue(
                    "agentloop.wire.2", main.exchange, routing_key="agentloop.wire.2", durable=True
                )
                old(connection.default_channel).declare()
            gate = WireGate(rabbit)
            for number in (1, 2):
                gate.defer(Delivered(rabbit, {WIRE_HEADER: 2, "id": f"t-{number}"}), 2)
            with rabbit.connection_for_write() as connection:
                depth = connection.default_channel.queue_declare(
                    "agentloop.wire.2", passive=True
                ).message_count
            assert depth == 2
            assert list_queues(target.vhost)["agentloop.wire.2"][0] == "classic"
            warned = [r for r in caplog.records if "exists with other arguments" in r.getMessage()]
            assert len(warned) == 1  # once per worker, not per message
        finally:
            rabbit.close()
    finally:
        context.__exit__(None, None, None)


class Decoded(Delivered):
    """A delivered message whose body kombu decodes (as JSON)."""

    @property
    def payload(self) -> Any:
        return json.loads(self.body)


def test_a_malformed_message_of_a_newer_wire_version_is_refused_not_deferred(
    wire_v1_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The edge's checks come first: a newer release never sends a malformed message, so a newer
    version on one is no reason to park it for a newer worker (it would bounce between queues)."""
    from celery.worker.consumer.consumer import Consumer

    handled: list[Any] = []
    monkeypatch.setattr(Consumer, "create_task_handler", lambda self, *a, **k: handled.append)
    consumer = EdgeConsumer.__new__(EdgeConsumer)
    consumer.app, consumer.wire_gate = wire_v1_app, WireGate(wire_v1_app)
    deferred: list[Any] = []
    refused: list[tuple[Any, str]] = []
    monkeypatch.setattr(consumer, "defer", lambda message, version: deferred.append(message), raising=False)
    monkeypatch.setattr(consumer, "refuse", lambda message, why: refused.append((message, why.reason)))
    on_task_received = consumer.create_task_handler()

    malformed = Decoded(wire_v1_app, {WIRE_HEADER: 2})
    malformed.body = b'{"not": "the task protocol"}'
    on_task_received(malformed)
    sound = Decoded(wire_v1_app, {WIRE_HEADER: 2})
    on_task_received(sound)

    assert [message for message, _ in refused] == [malformed]
    assert "protocol" in refused[0][1] or "args" in refused[0][1], refused[0][1]
    assert deferred == [sound] and handled == []

"""``agentloop_queue_depth`` on a real broker (a private Redis, a private RabbitMQ vhost): the
dead-letter queue and the holding queues an operator alerts on are reported (issue 33, item 10f),
and the label set stays the same whatever versions messages were parked for (item 6c)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from celery import Celery
from kombu.entity import Queue

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.config import dead_letter_queue_name
from agentloop.orchestration.celery_adapter.wire_versions import WireGate, holding_queue_entity
from agentloop.orchestration.celery_adapter.worker_metrics import queue_depths
from agentloop.orchestration.settings import load_settings
from agentloop.orchestration.wire import MAX_VERSIONS_AHEAD, WIRE_HEADER
from tests.services.rabbitmq import private_rabbitmq
from tests.services.redis_server import ServiceUnavailable, private_redis

pytestmark = pytest.mark.integration


@pytest.fixture(params=["redis", "rabbitmq"])
def broker_app(request: pytest.FixtureRequest) -> Iterator[Celery]:
    with ExitStack() as stack:
        try:
            if request.param == "redis":
                url = stack.enter_context(private_redis())
            else:
                target = stack.enter_context(private_rabbitmq())
                if not target.private:
                    pytest.skip("rabbitmqctl cannot make a private vhost here")
                url = target.url
        except ServiceUnavailable as unavailable:
            pytest.skip(unavailable.reason)
        broker_app = create_app(
            settings=load_settings({"BROKER_URL": url, "DATABASE_URL": "sqlite://"}),
            overrides={"result_backend": "cache+memory://"},
        )
        stack.callback(broker_app.close)
        yield broker_app


def _publish(app: Celery, queue: Queue, count: int) -> None:
    with app.producer_or_acquire() as producer:
        for number in range(count):
            producer.publish(
                {"n": number}, exchange=queue.exchange, routing_key=queue.routing_key, declare=[queue]
            )


class Parked:
    """A delivered message as the wire gate reads it (the gate re-publishes it and acknowledges it)."""

    def __init__(self, version: int) -> None:
        self.headers = {"task": "agentloop.launch", "id": f"t-{version}", WIRE_HEADER: version}
        self.body, self.content_type, self.content_encoding = b"[[], {}, {}]", "application/json", "utf-8"
        self.properties: dict[str, Any] = {}
        self.delivery_info: dict[str, Any] = {}

    def ack(self) -> None:
        pass


def test_the_dead_letter_and_holding_queues_are_reported_and_the_labels_stay_bounded(
    broker_app: Celery,
) -> None:
    default = str(broker_app.conf.task_default_queue)
    dead = dead_letter_queue_name(default)
    exchange = broker_app.amqp.queues[default].exchange
    arguments = {"x-queue-type": "quorum"} if broker_app.conf.broker_url.startswith("amqp") else None
    _publish(broker_app, Queue(dead, exchange, routing_key=dead, durable=True, queue_arguments=arguments), 2)  # type: ignore[no-untyped-call]
    _publish(broker_app, holding_queue_entity(broker_app, 2), 1)

    before = queue_depths(broker_app)
    assert before[dead] == 2 and before[f"{default}.wire.2"] == 1
    assert before[default] == 0 and before[f"{default}.wire.3"] == 0  # declared by nobody yet: none wait

    gate = WireGate(broker_app)
    for version in range(2, 2 + MAX_VERSIONS_AHEAD):  # every version a worker parks for
        gate.defer(Parked(version), version)
    after = queue_depths(broker_app)
    assert set(after) == set(before)  # the same series, whatever was parked
    assert after[f"{default}.wire.2"] == 2 and after[f"{default}.wire.{1 + MAX_VERSIONS_AHEAD}"] == 1
    assert after[dead] == 2

"""The RabbitMQ projection of the settings, without a broker: quorum queues with the delivery limit
and a dead-letter queue, the batch queue and its route, publisher confirms; Redis unchanged; and the
edge's reading of RabbitMQ's delivery count (``tests/integration/test_rabbitmq_quorum.py`` runs it
all on a real worker)."""

from __future__ import annotations

from typing import Any

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.batches import BATCH_PRIORITY
from agentloop.orchestration.celery_adapter.config import celery_config, queue_config
from agentloop.orchestration.celery_adapter.edge import DELIVERY_COUNT_HEADER, past_delivery_limit
from agentloop.orchestration.celery_adapter.pack_policy import PackRouter
from agentloop.orchestration.settings import load_settings
from agentloop.orchestration.wire import BATCH_CHUNK, LAUNCH, PACK

AMQP = "amqp://guest:guest@127.0.0.1:5672//"


def test_on_amqp_both_queues_are_quorum_queues_with_the_limit_and_a_dead_letter_queue() -> None:
    config = celery_config(load_settings({"BROKER_URL": AMQP, "AGENTLOOP_DELIVERY_LIMIT": "7"}))

    queues = {queue.name: queue for queue in config["task_queues"]}
    assert sorted(queues) == ["agentloop", "agentloop.batch"]
    for name, queue in queues.items():
        assert queue.queue_arguments == {
            "x-queue-type": "quorum",
            "x-delivery-limit": 7,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "agentloop.dead",
        }
        assert (queue.exchange.name, queue.exchange.type, queue.routing_key) == ("agentloop", "topic", name)
    assert config["broker_transport_options"]["confirm_publish"] is True
    assert config["task_default_exchange_type"] == "topic"  # native delayed delivery needs it


def test_on_redis_nothing_changes_one_queue_no_routes_no_confirms() -> None:
    config = celery_config(load_settings({"REDIS_URL": "redis://127.0.0.1:6379/0"}))

    assert (config["task_queues"], config["task_routes"]) == (None, None)
    assert config["task_default_queue"] == "agentloop"
    assert "confirm_publish" not in config["broker_transport_options"]
    assert queue_config("redis://x", "q", 3)["task_default_exchange_type"] == "direct"


def test_batch_messages_route_to_the_batch_queue_and_others_to_the_default() -> None:
    app = create_app(overrides={"broker_url": AMQP, "task_default_queue": "agents"})
    try:
        route = app.amqp.router.route
        assert route({"priority": BATCH_PRIORITY}, LAUNCH, (), {})["queue"].name == "agents.batch"
        assert route({"priority": BATCH_PRIORITY}, BATCH_CHUNK, (), {})["queue"].name == "agents.batch"
        assert route({}, LAUNCH, (), {})["queue"].name == "agents"
        # a pack goes to the holding queue of the version that reads packs, declared as the queue
        packed = route({"priority": BATCH_PRIORITY}, PACK, (), {}, app.tasks[PACK])["queue"]
        assert packed.name == "agents.wire.2"
        assert packed.queue_arguments == app.amqp.queues["agents"].queue_arguments
        assert app.conf.broker_transport_options["confirm_publish"] is True
    finally:
        app.close()


def test_overriding_the_broker_back_to_redis_drops_the_rabbitmq_queues() -> None:
    settings = load_settings({"BROKER_URL": AMQP, "RESULT_BACKEND": "cache+memory://"})
    app = create_app(settings=settings, overrides={"broker_url": "redis://127.0.0.1:6379/0"})
    try:
        # no RabbitMQ route is left: only the packs' own, which every broker has (pack_policy.py)
        assert app.conf.task_queues is None
        assert [type(route) for route in app.conf.task_routes] == [PackRouter]
        assert "confirm_publish" not in app.conf.broker_transport_options
    finally:
        app.close()


class Delivered:
    """What :func:`past_delivery_limit` reads of a kombu message."""

    def __init__(self, count: Any) -> None:
        self.headers = {"task": LAUNCH, "id": "t-1", DELIVERY_COUNT_HEADER: count}
        self.payload = [[], {"runnable": "parity.count", "input": 1}, {}]


def test_the_delivery_at_the_limit_is_refused_with_its_arguments_the_ones_before_run() -> None:
    assert past_delivery_limit(Delivered(0), 3) is None
    assert past_delivery_limit(Delivered(2), 3) is None
    assert past_delivery_limit(Delivered("3"), 3) is None  # not RabbitMQ's count: not ours to judge
    refused = past_delivery_limit(Delivered(3), 3)
    assert refused is not None and refused.exhausted
    assert (refused.task, refused.task_id, refused.run_id) == (LAUNCH, "t-1", "t-1")
    assert refused.kwargs == {"runnable": "parity.count", "input": 1} and refused.args == ()
    assert "delivery limit 3" in refused.reason

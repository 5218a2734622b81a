"""Real prefork worker processes on private servers, configured through the environment like production."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from celery.exceptions import InvalidTaskError

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.wire import PING, WIRE_VERSION
from tests.services import rabbitmq as rabbitmq_module
from tests.services.rabbitmq import RabbitMQTarget, private_rabbitmq
from tests.services.redis_server import RedisServer, ServiceUnavailable
from tests.services.worker import WorkerStartError, run_worker_process

pytestmark = pytest.mark.integration


@contextmanager
def client(broker_url: str, result_backend: str, **overrides: Any) -> Iterator[Any]:
    """A client app (what another service would use) for the ``with`` block."""
    app = create_app(overrides={"broker_url": broker_url, "result_backend": result_backend, **overrides})
    try:
        yield app
    finally:
        app.close()


def test_a_prefork_worker_process_on_redis_round_trips_ping(redis_server: RedisServer) -> None:
    url = redis_server.url
    with (
        run_worker_process(broker_url=url, result_backend=url, concurrency=2) as worker,
        client(url, url) as app,
    ):
        results = [app.send_task(PING) for _ in range(4)]
        assert [result.get(timeout=10) for result in results] == ["pong"] * 4
        assert {result.info for result in results} == {"pong"}
        assert worker.is_alive()
        assert "agentloop.ping" in worker.log_text()
    assert not worker.is_alive()


def test_the_worker_takes_its_configuration_from_the_environment(redis_server: RedisServer) -> None:
    url = redis_server.url
    env = {
        "AGENTLOOP_TASK_DEFAULT_QUEUE": "agents-test",
        "AGENTLOOP_TASK_SOFT_TIME_LIMIT": "100",
        "AGENTLOOP_TASK_TIME_LIMIT": "120",
    }
    with (
        run_worker_process(broker_url=url, result_backend=url, env=env) as worker,
        client(url, url, task_default_queue="agents-test") as app,
    ):
        assert app.send_task(PING).get(timeout=10) == "pong"
        conf = app.control.inspect([worker.hostname], timeout=5).conf()[worker.hostname]
        active_queues = app.control.inspect([worker.hostname], timeout=5).active_queues()[worker.hostname]
    assert (conf["task_soft_time_limit"], conf["task_time_limit"]) == (100, 120)
    assert conf["broker_transport_options"] == {
        "visibility_timeout": 420,
        "unacked_restore_interval": 60,
        "unacked_restore_throttle": 1,
        "unacked_mutex_expire": 60,
        "agentloop_atomic_delivery": True,  # redis_delivery.py: no message only in a worker's memory
    }
    assert conf["accept_content"] == ["json"]
    assert conf["task_acks_late"] is True
    assert conf["worker_prefetch_multiplier"] == 1
    # and the holding queues of the wire versions it reads (2 up to its own: wire_versions.py)
    holding = [f"agents-test.wire.{version}" for version in range(2, WIRE_VERSION + 1)]
    assert sorted(queue["name"] for queue in active_queues) == ["agents-test", *holding]


def test_a_worker_process_refuses_pickle_messages(redis_server: RedisServer) -> None:
    url = redis_server.url
    with run_worker_process(broker_url=url, result_backend=url) as worker, client(url, url) as app:
        refused = app.send_task(PING, serializer="pickle")
        # Messages are consumed in order: when the JSON ping is answered, the pickle one was refused.
        assert app.send_task(PING).get(timeout=10) == "pong"
        with pytest.raises(InvalidTaskError, match="untrusted content of type pickle"):
            refused.get(timeout=5)  # refused at the worker's edge: its sender is told at once
        log = worker.log_text()
    assert "Refusing to deserialize untrusted content of type pickle" in log
    assert f"{refused.id}] received" not in log  # never accepted as a task


def test_a_worker_that_cannot_start_fails_with_its_log_tail(redis_server: RedisServer) -> None:
    url = redis_server.url
    with (
        pytest.raises(WorkerStartError, match="no_such_module_for_agentloop_tests"),
        run_worker_process(
            broker_url=url,
            result_backend=url,
            imports=["no_such_module_for_agentloop_tests"],
            start_timeout=20,
        ),
    ):
        pytest.fail("the worker must not start")


def test_a_killed_worker_dies_with_its_pool(redis_server: RedisServer) -> None:
    url = redis_server.url
    with run_worker_process(broker_url=url, result_backend=url, concurrency=1) as worker:
        worker.kill(signal.SIGKILL)
        assert worker.wait(timeout=10) == -signal.SIGKILL
        assert not worker.is_alive()


def test_the_private_redis_server_restarts_on_the_same_port(restartable_redis: RedisServer) -> None:
    redis_server = restartable_redis
    redis_server.stop()
    with pytest.raises(redis.ConnectionError), redis.Redis.from_url(redis_server.url) as down:
        down.ping()
    redis_server.start()
    with redis.Redis.from_url(redis_server.url) as up:
        assert up.ping() is True
    assert redis_server.url == f"redis://127.0.0.1:{redis_server.port}/0"


def test_a_worker_on_rabbitmq_with_redis_results_round_trips_ping(
    rabbitmq: RabbitMQTarget, redis_server: RedisServer
) -> None:
    results = redis_server.url
    with (
        run_worker_process(
            broker_url=rabbitmq.url,
            result_backend=results,
            env={"AGENTLOOP_TASK_DEFAULT_QUEUE": rabbitmq.queue},
        ),
        client(rabbitmq.url, results, task_default_queue=rabbitmq.queue) as app,
    ):
        assert app.send_task(PING).get(timeout=10) == "pong"


def test_without_rabbitmqctl_the_default_vhost_is_shared_with_a_unique_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: str) -> None:
        raise FileNotFoundError("rabbitmqctl")

    monkeypatch.setattr(rabbitmq_module, "_rabbitmqctl", refuse)
    try:
        with private_rabbitmq() as target, client(target.url, "cache+memory://") as app:
            assert (target.vhost, target.private) == ("/", False)
            assert target.queue.startswith("agentloop-test-")
            with app.connection_for_write() as conn:
                conn.default_channel.queue_declare(target.queue, durable=True, auto_delete=False)
    except ServiceUnavailable as exc:
        pytest.skip(exc.reason)
    with (
        client(target.url, "cache+memory://") as app,
        app.connection_for_write() as conn,
        pytest.raises(Exception, match="NOT_FOUND"),
    ):
        conn.default_channel.queue_declare(target.queue, passive=True)  # deleted on exit

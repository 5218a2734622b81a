"""A rolling deploy with two versions of the worker on one private Redis, real prefork workers.

The old worker speaks wire version 1, the new one version 2 (the code's is 2 since packing is the
default; both are set with ``AGENTLOOP_WIRE_VERSION_OVERRIDE``, read through the settings). One
scenario, in the order a deploy goes:

1. a run starts on the old worker and is held inside its first step;
2. a client already on the new version sends a launch: the old worker, the only one, cannot read
   it and parks it at once in the holding queue of version 2; it never runs there, never fails,
   and is not lost;
3. the new worker starts and takes the parked launch from the holding queue;
4. the old worker gets a warm shutdown (TERM) while its step runs; the step finishes, the old
   worker exits, and the run's next step, a version-1 message, runs on the new worker.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import redis

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.wire_versions import holding_queue
from agentloop.orchestration.client import CeleryAgentRunner
from agentloop.orchestration.registry import RunnableRegistry
from agentloop.orchestration.settings import load_settings
from agentloop.orchestration.wire import DEFERRALS_HEADER, LAUNCH, WIRE_HEADER
from tests.services.private_services import redis_and_store
from tests.services.rabbitmq import close_connections, list_queues, private_rabbitmq
from tests.services.redis_server import ServiceUnavailable
from tests.services.worker import WorkerGroup, WorkerProcess, run_worker_process

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
ROOT = TESTS.parent
MODULES = ("deploy_workflows",)
#: A ceiling on every wait below: reached, the test fails with what it waited for; never a verdict.
CEILING = 90.0


def wait_for(what: str, condition: Callable[[], Any], worker: WorkerProcess | None = None) -> Any:
    deadline = time.monotonic() + CEILING
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if worker is not None and not worker.is_alive():
            break
        time.sleep(0.05)
    tail = "" if worker is None else f"; worker log tail:\n{worker.log_text()[-4000:]}"
    raise AssertionError(f"never saw {what}{tail}")


def _rig(stack: ExitStack, tmp_path: Path, broker: str) -> dict[str, Any]:
    """Apps of wire versions 1 and 2, a run store, and workers of either version, on a private
    Redis (``broker="redis"``) or a private RabbitMQ vhost (results on the private Redis)."""
    services = redis_and_store(stack, tmp_path)
    server, database_url, store = services.redis, services.database_url, services.store
    broker_url, vhost = server.url, None
    if broker == "rabbitmq":
        try:
            target = stack.enter_context(private_rabbitmq())
        except ServiceUnavailable as unavailable:
            pytest.skip(unavailable.reason)
        if not target.private:
            pytest.skip("rabbitmqctl cannot make a private vhost here (its connections are closed)")
        broker_url, vhost = target.url, target.vhost
    base = {"BROKER_URL": broker_url, "RESULT_BACKEND": server.url, "DATABASE_URL": database_url}
    registry = RunnableRegistry.from_modules(MODULES)
    apps = {}
    for version in (1, 2):
        environ = {**base, "AGENTLOOP_WIRE_VERSION_OVERRIDE": str(version)}  # 1: a release before 39
        app = create_app(settings=load_settings(environ), registry=registry, store=store)
        stack.callback(app.close)
        apps[version] = app
    client = redis.Redis.from_url(server.url)
    stack.callback(client.close)
    workers = WorkerGroup(stack)

    def worker(version: int, **options: Any) -> WorkerProcess:
        env = {"DATABASE_URL": database_url, "PYTHONPATH": os.pathsep.join(map(str, (ROOT, TESTS, HERE)))}
        env["AGENTLOOP_WIRE_VERSION_OVERRIDE"] = str(version)  # 1: a worker of a release before 39
        return workers.start(
            run_worker_process(
                broker_url=broker_url, result_backend=server.url, imports=MODULES, env=env, **options
            )
        )

    def reconnect() -> None:
        """Cut every client's broker connection: the workers reconnect."""
        if vhost is None:
            client.client_kill_filter(_type="normal")  # all but this client (SKIPME yes)
        else:
            close_connections(vhost)

    return {
        "apps": apps,
        "store": store,
        "redis": client,
        "worker": worker,
        "reconnect": reconnect,
        "vhost": vhost,
    }


@pytest.fixture
def deploy_rig(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with ExitStack() as stack:
        yield _rig(stack, tmp_path, "redis")


@pytest.fixture(params=["redis", "rabbitmq"])
def either(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    with ExitStack() as stack:
        yield _rig(stack, tmp_path, str(request.param))


def test_a_run_started_on_old_workers_completes_on_new_ones_and_newer_messages_wait_for_them(
    deploy_rig: dict[str, Any], tmp_path: Path
) -> None:
    apps, store, broker = deploy_rig["apps"], deploy_rig["store"], deploy_rig["redis"]
    old = deploy_rig["worker"](1, concurrency=2, loglevel="DEBUG")
    gate, started = tmp_path / "gate", tmp_path / "started"

    # 1. a run of two steps starts on the old worker, held in its first step
    held = CeleryAgentRunner.create(runnable="deploy.two_steps", app=apps[1], store=store).request_sync(
        input={"gate": str(gate), "started": str(started)}
    )
    wait_for("the first step start on the old worker", started.exists, old)

    # 2. a launch of wire version 2 reaches only the old worker: parked
    newer = CeleryAgentRunner.create(runnable="deploy.whose", app=apps[2], store=store).request_sync(
        input={"sent": "by a new client"}
    )
    parking = holding_queue(apps[2], 2)
    parked = wait_for("the version-2 launch parked", lambda: broker.lrange(parking, 0, -1), old)
    assert len(parked) == 1
    headers = json.loads(parked[0])["headers"]
    assert (headers["id"], headers[WIRE_HEADER], headers[DEFERRALS_HEADER]) == (newer.run_id, 2, 1)
    assert old.log_text().count(f"Parked agentloop.launch[{newer.run_id}]") == 1  # at once
    assert store.get_run(newer.run_id) is None  # never run by a worker that cannot read it
    assert not newer.result.ready()  # nor failed
    assert broker.llen(apps[1].conf.task_default_queue) == 0

    # 3. the new worker takes the parked launch from the holding queue
    new = deploy_rig["worker"](2, concurrency=1)
    assert newer.wait_sync(timeout=CEILING) == {"sent": "by a new client", "second": new.pid}
    assert broker.llen(parking) == 0

    # 4. warm shutdown of the old worker mid-step; its run's next step runs on the new worker
    old.kill(signal.SIGTERM, group=False)
    wait_for("the old worker stop consuming", lambda: "Canceling task consumer" in old.log_text(), old)
    assert not held.result.ready()
    gate.touch()
    assert old.wait(timeout=CEILING) == 0
    assert held.wait_sync(timeout=CEILING) == {"first": old.pid, "second": new.pid}
    record = store.get_run(held.run_id)
    assert record is not None and record.status == "succeeded"
    assert new.is_alive()


def test_packs_reach_only_workers_that_run_them(deploy_rig: dict[str, Any]) -> None:
    """Issue 36: packing is the default, so a worker of this release sends ``agentloop.pack``
    with nobody asking; an older worker (version 1 here) on the same queue must never get one.
    Both composites end, the one launched by a version-1 client too; every pack went to the
    holding queue of version 2, which only the new worker reads."""
    apps, store = deploy_rig["apps"], deploy_rig["store"]
    old = deploy_rig["worker"](1, concurrency=2)
    new = deploy_rig["worker"](2, concurrency=2)
    handles = [
        CeleryAgentRunner.create(runnable="deploy.fan", app=apps[version], store=store).request_sync(
            input={"width": 6}
        )
        for version in (1, 2, 2)
    ]
    for handle in handles:
        workers = handle.wait_sync(timeout=CEILING)
        assert set(workers) <= {old.pid, new.pid}
    received = "Task agentloop.pack["
    assert received in new.log_text()  # packed by default, on the worker that reads packs
    assert received not in old.log_text(), old.log_text()[-3000:]
    assert "Parked agentloop.pack" not in old.log_text()  # never even handed one
    assert new.is_alive() and old.is_alive()


def test_runs_of_stages_reach_only_workers_that_run_them(deploy_rig: dict[str, Any]) -> None:
    """Issue 36: a worker of this release runs a pipeline's loop stages in one ``agentloop.stages``
    task by default; an older worker (version 1) on the same queue must never get one. Every
    pipeline ends, those launched by a version-1 client too (the old worker then chains a
    ``agentloop.stage`` task per stage, which any worker runs)."""
    apps, store = deploy_rig["apps"], deploy_rig["store"]
    old = deploy_rig["worker"](1, concurrency=2)
    new = deploy_rig["worker"](2, concurrency=2)
    handles = [
        CeleryAgentRunner.create(runnable="deploy.stages", app=apps[version], store=store).request_sync(
            input=[]
        )
        for version in (1, 1, 2, 2, 2, 2)
    ]
    for handle in handles:
        workers = handle.wait_sync(timeout=CEILING)
        assert len(workers) == 4 and set(workers) <= {old.pid, new.pid}
    received = "Task agentloop.stages["
    assert received in new.log_text()  # joined by default, on the worker that reads them
    assert received not in old.log_text(), old.log_text()[-3000:]
    assert "Parked agentloop.stages" not in old.log_text()  # never even handed one
    assert new.is_alive() and old.is_alive()


def test_each_task_message_says_the_wire_version_of_the_app_that_built_it(deploy_rig: dict[str, Any]) -> None:
    for version, app in deploy_rig["apps"].items():
        for name in ("agentloop.launch", "agentloop.stage"):
            message = app.amqp.as_task_v2(str(uuid.uuid4()), name, (), {"runnable": "x"})
            assert message.headers[WIRE_HEADER] == version
        celerys_own = app.amqp.as_task_v2(str(uuid.uuid4()), "celery.chord_unlock", (), {})
        assert WIRE_HEADER not in celerys_own.headers


def _depth(app: Any, queue: str) -> int:
    """Messages ready in ``queue`` (a passive declare: Redis' lists, RabbitMQ's ready count)."""
    with app.connection_for_write() as connection:
        channel = connection.channel()
        try:
            return int(channel.queue_declare(queue=queue, passive=True).message_count)
        except connection.channel_errors:
            return 0
        finally:
            channel.close()


def _consumed(app: Any, worker: WorkerProcess) -> set[str]:
    """The queues ``worker``'s consumer reads now (remote control's ``active_queues``)."""
    with app.connection_for_write() as connection:  # a fresh one: a reconnect cut the pooled ones
        inspect = app.control.inspect(destination=[worker.hostname], timeout=5.0, connection=connection)
        replies = inspect.active_queues() or {}
    return {queue["name"] for queue in replies.get(worker.hostname, [])}


def test_after_a_broker_reconnect_a_worker_never_reads_the_holding_queue_it_parked_in(
    either: dict[str, Any],
) -> None:
    """Issue 33, item 1: parking added the holding queue to the worker's consumed set, so after a
    reconnect it consumed its own parked messages and parked them again, hundreds a second."""
    apps, store = either["apps"], either["store"]
    old = either["worker"](1, concurrency=1)
    consumed_before = _consumed(apps[1], old)
    newer = CeleryAgentRunner.create(runnable="deploy.whose", app=apps[2], store=store).request_sync(
        input={"sent": "by a new client"}
    )
    parking = holding_queue(apps[2], 2)
    wait_for("the version-2 launch parked", lambda: _depth(apps[1], parking) == 1, old)
    parked = f"Parked agentloop.launch[{newer.run_id}]"
    if either["vhost"] is not None:  # issue 33, item 6: declared as the default queue is
        queues = list_queues(either["vhost"])
        assert queues[parking] == queues["agentloop"]
        kind, arguments = queues[parking]
        assert kind == "quorum" and arguments["x-dead-letter-routing-key"] == "agentloop.dead", arguments
        assert arguments["x-delivery-limit"] > 0, arguments

    either["reconnect"]()
    wait_for("the old worker reconnect", lambda: old.log_text().count("Connected to ") >= 2, old)
    # a barrier: a run of version 1 sent after the reconnect ends, so the consumer reads again
    plain = CeleryAgentRunner.create(runnable="deploy.whose", app=apps[1], store=store).request_sync(
        input={"sent": "after the reconnect"}
    )
    assert plain.wait_sync(timeout=CEILING) == {"sent": "after the reconnect", "second": old.pid}

    assert parking not in consumed_before
    assert _consumed(apps[1], old) == consumed_before  # no holding queue of a newer version
    assert old.log_text().count(parked) == 1, old.log_text()[-3000:]
    assert _depth(apps[1], parking) == 1  # still there, once
    assert store.get_run(newer.run_id) is None and not newer.result.ready()

    new = either["worker"](2, concurrency=1)
    assert parking in _consumed(apps[2], new)
    assert newer.wait_sync(timeout=CEILING) == {"sent": "by a new client", "second": new.pid}
    assert _depth(apps[1], parking) == 0
    assert old.log_text().count(parked) == 1


def test_a_forged_wire_version_far_ahead_is_refused_on_a_real_worker_and_makes_no_queue(
    either: dict[str, Any],
) -> None:
    """Issue 33, item 6b: each forged ``agentloop_wire`` value above the worker's made a holding
    queue of its own; one more than ``MAX_VERSIONS_AHEAD`` above is now a malformed message."""
    apps, store = either["apps"], either["store"]
    old = either["worker"](1, concurrency=1)
    app, forged, run_id = apps[1], 1000, f"forged-{uuid.uuid4().hex[:8]}"
    kwargs = {"runnable": "deploy.whose", "input": {"sent": "forged"}, "run_id": run_id}
    headers, properties, body, _ = app.amqp.as_task_v2(run_id, LAUNCH, (), kwargs)
    headers = {**headers, WIRE_HEADER: forged}  # past stamp(), as a sender with kombu alone
    with app.producer_or_acquire() as producer:
        queue = app.amqp.queues[app.conf.task_default_queue]
        producer.publish(
            body,
            exchange=queue.exchange,
            routing_key=queue.routing_key,
            headers=headers,
            serializer="json",
            declare=[queue],
            **properties,
        )
    record = wait_for(
        "the forged launch recorded failed",
        lambda: (found := store.get_run(run_id)) is not None and found.is_finished and found,
        old,
    )
    assert record.status == "failed" and "wire version" in str(record.error), record.error
    assert f"Parked agentloop.launch[{run_id}]" not in old.log_text()
    name = holding_queue(app, forged)
    if either["vhost"] is not None:
        assert name not in list_queues(either["vhost"])
    else:
        client = either["redis"]
        assert not [key for key in client.keys("*") if name.encode() in key]
        bindings = [member for key in client.keys("_kombu.binding.*") for member in client.smembers(key)]
        assert not [member for member in bindings if name.encode() in member]

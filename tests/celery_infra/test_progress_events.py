"""A task's ``task-progress`` events on a real Redis: what Flower's event consumer receives (the
type, the task's uuid, the worker's hostname, the progress), all sent through one dispatcher per
process, a new one after a failed send or in a forked child."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from celery import Celery

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.progress_events import (
    PROGRESS_EVENT,
    ProgressEvents,
    progress_events_of,
)
from agentloop.orchestration.settings import load_settings
from tests.services.redis_server import RedisServer

pytestmark = pytest.mark.integration


@pytest.fixture
def restartable_app(restartable_redis: RedisServer) -> Iterator[Celery]:
    urls = {"broker_url": restartable_redis.url, "result_backend": restartable_redis.url}
    restartable_app = create_app(settings=load_settings({}), overrides=urls)
    yield restartable_app
    progress_events_of(restartable_app).close()


class Receiver:
    """Flower's side: a celery event receiver collecting ``task-progress`` events in a thread."""

    def __init__(self, app: Celery) -> None:
        self.app, self.events = app, []  # type: list[dict[str, Any]]
        self.ready, self.stop = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._consume, daemon=True)

    def _consume(self) -> None:
        with self.app.connection_for_read() as connection:
            receiver = self.app.events.Receiver(connection, handlers={PROGRESS_EVENT: self.events.append})
            consumer = receiver.consume(limit=None, timeout=0.2, wakeup=False)
            while not self.stop.is_set():
                try:
                    next(consumer)
                except (TimeoutError, OSError):
                    pass
                except StopIteration:
                    return
                self.ready.set()  # subscribed: the fanout's events reach it from now on

    def __enter__(self) -> Receiver:
        self.thread.start()
        assert self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)

    def wait_for(self, count: int) -> list[dict[str, Any]]:
        for _ in range(100):
            if len(self.events) >= count:
                break
            self.stop.wait(0.05)
        return self.events


def send(app: Celery, task_id: str, progress: dict[str, Any]) -> None:
    task = app.tasks["agentloop.progress"]
    task.push_request(id=task_id, hostname="worker@test")
    try:
        progress_events_of(app).send(task, progress)
    finally:
        task.pop_request()


def test_progress_events_reach_an_event_consumer_through_one_dispatcher(restartable_app: Celery) -> None:
    with Receiver(restartable_app) as receiver:
        with ThreadPoolExecutor(max_workers=8) as pool:  # a threads worker's tasks, at once
            list(pool.map(lambda n: send(restartable_app, f"task-{n}", {"iteration": n}), range(40)))
        events = receiver.wait_for(40)

    assert len(events) == 40
    assert {event["uuid"] for event in events} == {f"task-{n}" for n in range(40)}
    assert {event["type"] for event in events} == {PROGRESS_EVENT}
    assert {event["hostname"] for event in events} == {"worker@test"}
    assert sorted(event["progress"]["iteration"] for event in events) == list(range(40))
    assert progress_events_of(restartable_app).built == 1  # Celery's Task.send_event would have built 40


def test_a_failed_send_or_a_forked_child_builds_a_new_dispatcher(
    restartable_app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = progress_events_of(restartable_app)
    send(restartable_app, "t1", {"n": 1})
    assert events.built == 1

    broken = events._dispatcher

    def fail(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("broker gone")

    monkeypatch.setattr(broken, "send", fail)
    with pytest.raises(ConnectionError):
        send(restartable_app, "t2", {"n": 2})
    send(restartable_app, "t3", {"n": 3})
    assert events.built == 2 and events._dispatcher is not broken

    real_pid = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: real_pid + 1)  # as a prefork child sees it
    send(restartable_app, "t4", {"n": 4})
    assert events.built == 3


def test_create_app_gives_each_app_its_own_sender() -> None:
    first, second = create_app(settings=load_settings({})), create_app(settings=load_settings({}))
    assert isinstance(progress_events_of(first), ProgressEvents)
    assert progress_events_of(first) is progress_events_of(first)
    assert progress_events_of(first) is not progress_events_of(second)

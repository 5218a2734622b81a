"""An embedded worker thread on memory:// runs real tasks with no server, and refuses pickle."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import pytest
from celery import _state
from celery.exceptions import InvalidTaskError

from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.embedded import embedded_worker
from agentloop.orchestration.wire import PING


def test_an_embedded_memory_worker_round_trips_ping(memory_app: Any) -> None:
    with embedded_worker(memory_app):
        assert memory_app.send_task(PING).get(timeout=10) == "pong"
        assert memory_app.tasks[PING].delay().get(timeout=10) == "pong"


def test_the_embedded_worker_gives_back_the_current_and_default_app(memory_app: Any) -> None:
    previous_default, previous_current = _state.default_app, _state._tls.current_app
    with embedded_worker(memory_app):
        assert _state.default_app is memory_app  # start_worker's doing
    assert (_state.default_app, _state._tls.current_app) == (previous_default, previous_current)


def test_the_embedded_worker_gives_back_the_root_loggers_level_and_handlers(memory_app: Any) -> None:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    with embedded_worker(memory_app, loglevel="ERROR"):
        assert memory_app.send_task(PING).get(timeout=10) == "pong"
    assert (root.level, root.handlers) == (level, handlers)  # later tests' warnings still reach them


def test_a_pickle_message_is_refused_and_never_executed(memory_app: Any) -> None:
    calls: list[str] = []

    def record(value: str) -> str:
        calls.append(value)
        return value

    memory_app.task(name="test.record", shared=False)(record)

    with embedded_worker(memory_app):
        refused = memory_app.send_task("test.record", args=["pickled"], serializer="pickle")
        # The solo worker takes messages in order: once the JSON one is done, the pickle one was seen.
        assert memory_app.send_task("test.record", args=["json"]).get(timeout=10) == "json"
        assert calls == ["json"]
        with pytest.raises(InvalidTaskError, match="untrusted content of type pickle"):
            refused.get(timeout=5)  # refused at the worker's edge: its sender is told at once


def test_the_app_itself_refuses_to_decode_pickle(memory_app: Any) -> None:
    from kombu.exceptions import ContentDisallowed
    from kombu.serialization import dumps, loads

    content_type, encoding, body = dumps({"x": 1}, serializer="pickle")  # type: ignore[no-untyped-call]
    with pytest.raises(ContentDisallowed):
        loads(body, content_type, encoding, accept=memory_app.conf.accept_content)  # type: ignore[no-untyped-call]


def _answering(name: str) -> Any:
    def whose() -> str:
        return name

    return whose


@pytest.mark.parametrize("pool", ["solo", "threads"])
def test_two_embedded_workers_in_one_process_each_run_their_own_apps_tasks(pool: str) -> None:
    """Celery runs a task of a solo or threads pool on ``current_app``, which ``start_worker`` sets
    to the app started last: the first app's messages ran with the second app's tasks (and so its
    registry and store) until each task ran with its worker's app as the current one."""
    apps = {}
    for name in ("first", "second"):
        app = create_app(
            overrides={
                "broker_url": "memory://",
                "result_backend": "cache+memory://",
                "task_default_queue": f"{name}-{uuid.uuid4().hex[:8]}",
            }
        )
        app.task(name="test.whose", shared=False)(_answering(name))
        apps[name] = app
    try:
        with embedded_worker(apps["first"], pool=pool), embedded_worker(apps["second"], pool=pool):
            ran = {
                name: [app.send_task("test.whose").get(timeout=10) for _ in range(3)]
                for name, app in apps.items()
            }
    finally:
        for app in apps.values():
            app.close()

    assert ran == {"first": ["first"] * 3, "second": ["second"] * 3}


@pytest.mark.parametrize("pool", ["solo", "threads"])
def test_a_stopped_worker_s_loop_ends_without_waiting_out_its_round(
    memory_app: Any, monkeypatch: pytest.MonkeyPatch, pool: str
) -> None:
    """Celery's loop polls ``memory://`` for up to 2 s a round. The stop cancels the worker's
    consumers, so no message ended the round left waiting: it ran its 2 s out (a timeout) before
    the worker thread ended, in every embedded rig and every ``agentloop trigger --wait`` on the
    embedded defaults. How each round of the worker's polling ended, counted:"""
    from kombu.transport.memory import Transport

    ended: list[str] = []
    drain = Transport.drain_events

    def counted(self: Any, connection: Any, timeout: float | None = None) -> None:
        try:
            drain(self, connection, timeout=timeout)
        except BaseException as error:
            ended.append(type(error).__name__)
            raise
        ended.append("message")

    monkeypatch.setattr(Transport, "drain_events", counted)
    with embedded_worker(memory_app, pool=pool):
        assert memory_app.send_task(PING).get(timeout=10) == "pong"

    assert ended[-1] == "OSError", ended  # woken by the stop, not "TimeoutError": its 2 s waited out


def test_a_worker_that_stops_leaves_the_other_workers_of_the_process_running() -> None:
    """Celery's test worker stopped by setting the process-wide ``should_terminate`` (and never
    cleared it): a short-lived embedded worker's end stopped a long-lived one beside it, whose
    runs then stayed ``running`` (the test session's ``memory_celery`` rig, in CI)."""
    apps = [
        create_app(
            overrides={
                "broker_url": "memory://",
                "result_backend": "cache+memory://",
                "task_default_queue": f"{name}-{uuid.uuid4().hex[:8]}",
            }
        )
        for name in ("long", "short")
    ]
    long_lived, short_lived = apps
    try:
        with embedded_worker(long_lived, pool="threads", concurrency=2):
            with embedded_worker(short_lived):
                assert short_lived.send_task(PING).get(timeout=10) == "pong"
                for _ in range(300):  # the long-lived worker's loop goes round while the other stops
                    long_lived.send_task(PING, ignore_result=True)
            for _ in range(3):  # after the other's end, and past a round of its loop (2 s at most)
                assert long_lived.send_task(PING).get(timeout=10) == "pong"
                time.sleep(1.0)
            with embedded_worker(short_lived):  # and another can start after it
                assert short_lived.send_task(PING).get(timeout=10) == "pong"
    finally:
        for app in apps:
            app.close()

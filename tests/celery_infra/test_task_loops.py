"""A worker's tasks run on uvloop's event loop unless ``AGENTLOOP_EVENT_LOOP=asyncio``
(``celery_adapter/event_loops.py``): a lone loop (its launch task), a pack's branches."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery.contrib.testing.worker import TestWorkController

from agentloop import create_app, load_settings
from agentloop.orchestration.celery_adapter import event_loops
from agentloop.orchestration.celery_adapter.event_loops import TaskLoops, new_task_loop, use_event_loop
from agentloop.orchestration.errors import SettingsError
from agentloop.orchestration.store import open_store
from agentloop.orchestration.wire import LAUNCH
from tests.services.redis_server import RedisServer
from tests.services.worker import run_worker_process

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent
WORKFLOWS = "celery_infra.loop_kinds"


@pytest.fixture
def kept_factory() -> Iterator[None]:
    """This process's loop factory as it was, after the test."""
    factory = event_loops._LOOPS.new
    try:
        yield
    finally:
        event_loops._LOOPS.new = factory


def _kind_of_a_new_loop() -> str:
    loop = new_task_loop()
    try:
        return type(loop).__module__.split(".")[0]
    finally:
        loop.close()


def test_every_app_has_its_workers_pick_their_tasks_event_loop() -> None:
    assert TaskLoops in create_app(settings=load_settings({})).steps["worker"]


def test_an_embedded_worker_leaves_its_processs_loops_as_they_are(kept_factory: None) -> None:
    worker = TestWorkController.__new__(TestWorkController)  # its type and app are all the step reads
    worker.app = create_app(settings=load_settings({}))
    use_event_loop("asyncio")
    TaskLoops(worker)
    assert _kind_of_a_new_loop() == "asyncio"


def test_the_setting_defaults_to_uvloop_and_says_what_else_it_takes() -> None:
    assert load_settings({}).event_loop == "uvloop"
    assert load_settings({"AGENTLOOP_EVENT_LOOP": " AsyncIO "}).event_loop == "asyncio"
    with pytest.raises(SettingsError, match="AGENTLOOP_EVENT_LOOP must be uvloop or asyncio, not 'trio'"):
        load_settings({"AGENTLOOP_EVENT_LOOP": "trio"})


def test_use_event_loop_switches_the_loops_new_tasks_get(kept_factory: None) -> None:
    assert use_event_loop("uvloop") == "uvloop"
    assert _kind_of_a_new_loop() == "uvloop"
    assert use_event_loop("asyncio") == "asyncio"
    assert _kind_of_a_new_loop() == "asyncio"
    with pytest.raises(ValueError, match="must be one of uvloop, asyncio, not 'trio'"):
        use_event_loop("trio")
    assert _kind_of_a_new_loop() == "asyncio"  # a refused name changes nothing


def test_without_uvloop_a_worker_says_so_and_runs_asyncios_loop(
    kept_factory: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    with caplog.at_level(logging.WARNING, logger=event_loops.__name__):
        assert use_event_loop("uvloop") == "asyncio"
    assert _kind_of_a_new_loop() == "asyncio"
    assert "uvloop is not installed" in caplog.text


@pytest.mark.integration
@pytest.mark.parametrize(
    ("pool", "env", "kind"),
    [("threads", {}, "uvloop"), ("prefork", {"AGENTLOOP_EVENT_LOOP": "asyncio"}, "asyncio")],
    ids=["threads-default", "prefork-asyncio"],
)
def test_a_workers_tasks_run_on_the_loop_its_settings_name(
    redis_server: RedisServer, tmp_path: Path, pool: str, env: dict[str, str], kind: str
) -> None:
    database_url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    open_store(database_url)  # migrated here, not by the pool's processes at once
    worker_env = {"DATABASE_URL": database_url, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]), **env}
    url = redis_server.url
    app = create_app(overrides={"broker_url": url, "result_backend": url, "database_url": database_url})
    try:
        with run_worker_process(
            broker_url=url, result_backend=url, imports=[WORKFLOWS], env=worker_env, pool=pool, concurrency=2
        ):
            lone = app.send_task(LAUNCH, kwargs={"runnable": "tests.loop_kind", "input": None})
            fan = app.send_task(LAUNCH, kwargs={"runnable": "tests.loop_kind_fan", "input": 3})
            assert lone.get(timeout=30) == kind  # the launch task ran the loop itself
            assert fan.get(timeout=30) == [kind]  # the pack's branches, on the pack's loop
    finally:
        app.close()
    assert asyncio.get_event_loop_policy().__class__.__module__.startswith("asyncio")  # nothing set here

"""The app factory: configuration, the ping task, no global app, and URLs that never show a password."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from celery import Celery, _state
from celery.contrib.testing.app import set_trap

from agentloop.orchestration.celery_adapter.app import create_app, describe_app
from agentloop.orchestration.wire import PING

PROJECT_ROOT = Path(__file__).resolve().parents[2]


# redact_url (which describe_app uses) is tested in tests/operations/test_ops_redaction.py


def test_create_app_registers_the_ping_task_on_that_app_only() -> None:
    app = create_app(overrides={"broker_url": "memory://", "result_backend": "cache+memory://"})
    other = Celery("other", set_as_current=False)
    try:
        assert PING in app.tasks
        assert app.tasks[PING].run() == "pong"
        assert PING not in other.tasks
    finally:
        app.close()
        other.close()


def test_create_app_never_touches_the_current_or_default_app() -> None:
    previous_default = _state.default_app
    try:
        with set_trap(None):  # any fallback on current_app/default_app raises inside this block
            app = create_app(overrides={"broker_url": "memory://", "result_backend": "cache+memory://"})
            app.finalize()
            assert app.conf.task_serializer == "json"
            assert PING in app.tasks
    finally:
        _state.set_default_app(previous_default)
    assert _state.default_app is not app
    assert _state._tls.current_app is not app
    app.close()


def test_overrides_win_over_the_config_object() -> None:
    config = SimpleNamespace(broker_url="memory://", result_backend="cache+memory://", task_default_queue="a")
    app = create_app(config=config, overrides={"task_default_queue": "b"}, main="custom")
    try:
        assert app.main == "custom"
        assert app.conf.broker_url == "memory://"
        assert app.conf.task_default_queue == "b"
    finally:
        app.close()


def test_describe_app_shows_the_settings_without_passwords() -> None:
    app = create_app(
        overrides={
            "broker_url": "amqp://agent:hunter2@rabbit:5672/prod",
            "result_backend": "redis://:hunter2@redis:6379/0",
        }
    )
    try:
        description = describe_app(app)
    finally:
        app.close()
    assert "hunter2" not in repr(description)
    assert description["broker"] == "amqp://agent:***@rabbit:5672/prod"
    assert description["result_backend"] == "redis://:***@redis:6379/0"
    assert description["serializers"] == {"task": "json", "result": "json", "accept": ["json"]}
    assert description["visibility_timeout"] > description["task_time_limit"]


def test_celery_command_line_finds_the_deployed_app_and_masks_secrets(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key not in {"BROKER_URL", "RESULT_BACKEND"}}
    env["REDIS_URL"] = "redis://:hunter2@127.0.0.1:6399/0"  # nothing connects: report only reads settings
    env["AGENTLOOP_IMPORTS"] = ""
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "agentloop", "report"],
        cwd=tmp_path,  # the installed package, not the checkout's folders
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "transport:redis" in result.stdout
    assert "hunter2" not in result.stdout + result.stderr


def test_the_deployed_app_is_what_celery_finds_for_dash_a_agentloop() -> None:
    from celery.app.utils import find_app

    import agentloop.celery

    assert find_app("agentloop") is agentloop.celery.app
    assert PING in agentloop.celery.app.tasks

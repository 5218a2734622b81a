"""Library patches change nothing in a client process and are applied when a worker of the app starts.

Each check runs in a fresh interpreter: a patch is process-wide, so the test process (where other tests
start embedded workers) cannot tell a client from a worker. ``tests/integration/test_broker_restart.py``
shows on a real Redis that the kombu patch does its job.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agentloop.orchestration.celery_adapter.patches import (
    CELERY_CHORD_SCRIPTS_UNRETRIED,
    CELERY_IGNORE_LOGGED_ALWAYS,
    KOMBU_CLIENT_PER_CALL,
    KOMBU_RESTORE_DEFECT,
    light_ignored_outcomes,
    mend_ack_on_dead_connection,
    mend_restore_unacked,
    quiet_ignored_tasks,
)

ROOT = Path(__file__).resolve().parents[2]

_PRELUDE = """
import json
from agentloop.orchestration.celery_adapter.app import create_app
from agentloop.orchestration.celery_adapter.patches import (
    apply_worker_patches, celery_ignore_is_patched, chord_scripts_are_retried, install_worker_patches,
    kombu_client_is_shared, kombu_restore_is_patched,
)
app = create_app(overrides={"broker_url": "memory://", "result_backend": "cache+memory://"})
install_worker_patches(app)
"""


def _run(script: str) -> Any:
    """Run ``script`` after the prelude in a fresh interpreter; what it printed last, as JSON."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_client_process_that_builds_the_app_and_sends_tasks_patches_no_library() -> None:
    patched = _run("""
        app.send_task("agentloop.ping")
        print(json.dumps([
            kombu_restore_is_patched(), kombu_client_is_shared(), celery_ignore_is_patched(),
            chord_scripts_are_retried(),
        ]))
    """)
    assert patched == [False, False, False, False]


def test_a_worker_of_the_app_applies_the_patches_when_it_starts() -> None:
    patched = _run("""
        def flags():
            return [
                kombu_restore_is_patched(), kombu_client_is_shared(), celery_ignore_is_patched(),
                chord_scripts_are_retried(),
            ]

        before = flags()
        worker = app.WorkController(pool_cls="solo", concurrency=1, without_heartbeat=True)
        print(json.dumps([before, flags()]))
    """)
    assert patched == [[False, False, False, False], [True, True, True, True]]


def test_only_celery_versions_whose_chord_scripts_go_unretried_are_patched() -> None:
    first, beyond = CELERY_CHORD_SCRIPTS_UNRETRIED
    fixed_kombu = KOMBU_RESTORE_DEFECT[1]
    outcome = _run(f"""
        before = apply_worker_patches(kombu_version={fixed_kombu!r}, celery_version=(5, 6))
        fixed = apply_worker_patches(kombu_version={fixed_kombu!r}, celery_version={beyond!r})
        unpatched = chord_scripts_are_retried()
        patched = apply_worker_patches(kombu_version={fixed_kombu!r}, celery_version={first!r})
        again = apply_worker_patches(kombu_version={fixed_kombu!r}, celery_version={first!r})
        print(json.dumps([before, fixed, unpatched, patched, again, chord_scripts_are_retried()]))
    """)
    chord = ["celery-ignored-task-traceback", "celery-redis-chord-scripts-retried"]
    assert outcome == [["celery-ignored-task-traceback"], [], False, chord, chord, True]


def test_only_kombu_versions_known_to_have_the_defect_are_patched_and_only_once() -> None:
    assert KOMBU_CLIENT_PER_CALL == KOMBU_RESTORE_DEFECT  # both checked on kombu 5.4 to 5.7
    first, beyond = KOMBU_RESTORE_DEFECT
    fixed_celery = CELERY_IGNORE_LOGGED_ALWAYS[1]
    outcome = _run(f"""
        from kombu.transport.redis import Channel, QoS
        original, acquire = QoS.restore_unacked, Channel.conn_or_acquire
        fixed = (
            apply_worker_patches(kombu_version={beyond!r}, celery_version={fixed_celery!r}),
            kombu_restore_is_patched(),
        )
        old = (
            apply_worker_patches(kombu_version={first!r}, celery_version={fixed_celery!r}),
            kombu_restore_is_patched(),
        )
        apply_worker_patches(kombu_version={first!r}, celery_version={fixed_celery!r})
        once = QoS.restore_unacked.__wrapped__ is original, Channel.conn_or_acquire.__wrapped__ is acquire
        print(json.dumps([fixed, old, once, kombu_client_is_shared()]))
    """)
    patched = [
        "kombu-redis-restore-unacked",
        "kombu-redis-ack-on-dead-connection",
        "kombu-redis-shared-client",
    ]
    assert outcome == [[[], False], [patched, True], [True, True], True]


class _Connection:
    client: object | None = None


class _Channel:
    connection = _Connection()


class _QoS:
    channel = _Channel()

    def restore_unacked(self, client: object = None) -> None:
        raise AttributeError("'NoneType' object has no attribute 'hostname'")


def test_the_mended_restore_gives_way_only_when_the_connection_is_gone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    mend_restore_unacked(_QoS)
    with caplog.at_level(logging.WARNING):
        assert _QoS().restore_unacked() is None
    assert "return to the queue after the visibility timeout" in caplog.text

    alive = _QoS()
    alive.channel = _Channel()
    alive.channel.connection = _Connection()
    alive.channel.connection.client = object()
    with pytest.raises(AttributeError):  # a live connection: a real error, not swallowed
        alive.restore_unacked()


class _AckingQoS:
    channel = _Channel()

    def ack(self, delivery_tag: str) -> None:
        raise AttributeError("'NoneType' object has no attribute 'client'")

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        raise AttributeError("'NoneType' object has no attribute 'client'")


def test_an_ack_on_a_dead_connection_gives_way_and_says_the_message_comes_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    mend_ack_on_dead_connection(_AckingQoS)
    with caplog.at_level(logging.WARNING):
        assert _AckingQoS().ack("tag-1") is None
        assert _AckingQoS().reject("tag-2", requeue=True) is None
    assert caplog.text.count("returns to the queue after the visibility timeout") == 2

    alive = _AckingQoS()
    alive.channel = _Channel()
    alive.channel.connection = _Connection()
    alive.channel.connection.client = object()
    with pytest.raises(AttributeError):  # a live connection: a real error, not swallowed
        alive.ack("tag-3")


def _replaced() -> None:
    """A task's body (never run: the test hands its ``Ignore`` to the tracer)."""


def test_an_ignored_task_builds_its_log_record_only_when_its_level_is_logged(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task that replaces itself ends with ``Ignore``: unpatched, Celery's tracer builds an
    ``ExceptionInfo`` (the traceback formatted) for an ``INFO`` line a ``WARNING`` worker drops."""
    from billiard.einfo import ExceptionInfo
    from celery import Celery
    from celery.app import trace
    from celery.exceptions import Ignore
    from celery.states import IGNORED

    # Celery's own, whether or not a worker started earlier in this process patched it
    original = inspect.unwrap(trace.TraceInfo.handle_ignore)

    class Unpatched(trace.TraceInfo):
        __slots__ = ()
        handle_ignore = original

    class Patched(trace.TraceInfo):
        __slots__ = ()
        handle_ignore = original

    quiet_ignored_tasks(Patched)
    built: list[ExceptionInfo] = []

    def counted(*args: Any, **kwargs: Any) -> ExceptionInfo:
        built.append(ExceptionInfo(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(trace, "ExceptionInfo", counted)
    app = Celery("patches-test", set_as_current=False)
    task = app.task(name="t.replaced", shared=False)(_replaced)
    request = task.request_stack.top or task.request

    def ignored(kind: type[trace.TraceInfo], level: int) -> int:
        built.clear()
        try:
            raise Ignore("Replaced by new task")
        except Ignore as exc:
            with caplog.at_level(level, logger=trace.logger.name):
                kind(IGNORED, exc).handle_ignore(task, request)
        return len(built)

    assert ignored(Unpatched, logging.WARNING) == 1  # what a replaced task paid before
    assert ignored(Patched, logging.WARNING) == 0
    assert "ignored" not in caplog.text
    assert ignored(Patched, logging.INFO) == 1  # logged as before when INFO is
    assert "t.replaced" in caplog.text and "ignored" in caplog.text


def test_an_ignored_task_s_outcome_crosses_to_the_main_process_without_its_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tracer's ``ExceptionInfo(internal=True)`` of an ``Ignore`` goes to the worker's main
    process, which reads only its exception (and acknowledges the message): unpatched, the
    traceback was formatted for it too. Any other exception is recorded as before."""
    import pickle
    import traceback
    import types

    from billiard.einfo import ExceptionInfo, ExceptionWithTraceback
    from celery.exceptions import Ignore, Reject

    formatted: list[object] = []
    format_exception = traceback.format_exception

    def counted(*args: Any, **kwargs: Any) -> list[str]:
        formatted.append(args[0])
        return format_exception(*args, **kwargs)

    monkeypatch.setattr(traceback, "format_exception", counted)
    trace = types.SimpleNamespace(ExceptionInfo=ExceptionInfo)  # the module's name, patched alone

    def outcome(error: BaseException) -> Any:
        try:
            raise error
        except BaseException:
            return trace.ExceptionInfo(internal=True)

    outcome(Ignore("Replaced by new task"))
    assert formatted == [Ignore]  # what a replaced task paid before
    light_ignored_outcomes(trace)
    formatted.clear()

    ignored = outcome(Ignore("Replaced by new task"))
    assert formatted == [] and ignored.internal and ignored.traceback == ""
    assert isinstance(ignored.exception, ExceptionWithTraceback)  # as the full one's is
    sent = pickle.loads(pickle.dumps(ignored))  # what the main process reads: the Ignore
    assert isinstance(sent, ExceptionInfo) and isinstance(sent.exception, Ignore)
    rejected, failed = outcome(Reject("no", requeue=False)), outcome(ValueError("boom"))
    assert formatted == [Reject, ValueError]
    assert "Reject" in rejected.traceback and "boom" in failed.traceback

"""A secret in a node's context spec (an API key the context factory needs) never shows in the
exception text of a failing task: not in the worker's log lines, not in the ``task-failed`` event
Flower keeps. The task runs in this process (``Task.apply``), with no broker.

The node's context is what ``agentloop.orchestration.redaction`` hides of a ``node`` argument; a loop whose
error quotes its context, and a context factory whose refusal quotes the spec, are the two ways
the key gets into an exception's text.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from celery import Celery
from celery.contrib.testing.mocks import TaskMessage
from context_secrets_support import API_KEY, RUNNABLES, node_of

from agentloop.orchestration.celery_adapter.privacy import RedactingRequest
from agentloop.orchestration.wire import RUN


@pytest.mark.parametrize("runnable", RUNNABLES)
def test_the_failure_line_and_its_traceback_never_show_the_context_key(
    keyed_app: Celery, runnable: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="celery.app.trace"):
        result = keyed_app.tasks[RUN].apply(args=(node_of(keyed_app, runnable), {"question": "q"}))

    assert result.failed()
    assert "<hidden>" in str(result.result)  # the error did quote it: there was something to hide
    [line] = [r for r in caplog.records if "raised unexpected" in r.getMessage()]
    assert "<hidden>" in line.getMessage()
    assert "Traceback (most recent call last)" in caplog.text
    assert API_KEY not in caplog.text
    assert API_KEY not in str(vars(line).get("data"))  # what custom log handlers get


class _Eventer:
    enabled = True

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send(self, type: str, **fields: Any) -> None:
        self.sent.append((type, fields))


@pytest.mark.parametrize("runnable", RUNNABLES)
def test_the_task_failed_event_never_shows_the_context_key(keyed_app: Celery, runnable: str) -> None:
    node = node_of(keyed_app, runnable)
    result = keyed_app.tasks[RUN].apply(args=(node, {"question": "q"}))
    eventer = _Eventer()
    request = RedactingRequest(
        TaskMessage(RUN, args=(node, {"question": "q"})),
        app=keyed_app,
        task=keyed_app.tasks[RUN],
        eventer=eventer,
        hostname="w@h",
    )

    request.send_event("task-failed", exception=repr(result.result), traceback=result.traceback)

    [(kind, fields)] = eventer.sent
    assert kind == "task-failed" and "<hidden>" in repr(result.result)  # the error quoted the key
    assert "<hidden>" in fields["exception"]
    assert API_KEY not in fields["exception"] and API_KEY not in fields["traceback"]
    assert API_KEY not in request.argsrepr  # and the node shows where it is, not its context
    assert "node=<node runnable=" in request.argsrepr
